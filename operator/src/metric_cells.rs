//! Counter and gauge series that the dispatch path changes without a locked instruction: each
//! writer (a worker, or a kind's lanes under their lock) owns a [`Cell`] it alone changes, with
//! a plain load and store, and a scrape adds the cells to the series' value.
//!
//! Why: a prometheus `IntGauge::inc` or `IntCounter::inc` is an atomic read-modify-write (a
//! `lock`-prefixed instruction on x86), and dispatch made seven of them per event with one
//! handler (events counted, queue depth up and down, ongoing events and ongoing calls up and
//! down). Without them a one-handler no-op dispatch ran 7 % (watcher) to 12 % (reconciler) faster
//! (`docs/performance/dispatch-and-memory.md`). A cell's load and store are ordinary moves: correct because only
//! its owner writes it (`&mut self`), and a scrape on another thread reads a value at most one
//! change old, as it would read a gauge updated a moment later.
//!
//! What a scrape shows is unchanged: the same families, names, labels and values. A counter's
//! cell is folded into the series' shared counter when its writer ends, under the lock a scrape
//! takes, so the counter never goes back. A gauge's cell is discarded with its writer: what a
//! worker had running, or a kind had queued, ends with it.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

/// A series' labels as (name, value) pairs sorted by name: how a scraped metric names them.
type SeriesKey = Vec<(String, String)>;

/// The live cells of one series.
type CellList = Arc<Mutex<Vec<Arc<AtomicI64>>>>;

/// The shared prometheus vector behind a family.
#[derive(Clone)]
enum Shared {
    Gauge(IntGaugeVec),
    Counter(IntCounterVec),
}

/// The shared value of one series.
#[derive(Clone)]
enum SharedSeries {
    Gauge(IntGauge),
    Counter(IntCounter),
}

impl SharedSeries {
    fn get(&self) -> i64 {
        match self {
            Self::Gauge(gauge) => gauge.get(),
            Self::Counter(counter) => i64::try_from(counter.get()).unwrap_or(i64::MAX),
        }
    }
}

/// What a family's series share: the cell list of every series, and the lock that makes a
/// scrape and a counter's fold (see [`Cell`]'s `Drop`) one after the other.
#[derive(Default)]
struct Registry {
    series: Mutex<HashMap<SeriesKey, CellList>>,
    /// Held by a scrape across reading the shared values and the cells, and by a counter cell
    /// folding itself into the shared value, so a scrape counts a folding cell exactly once.
    scrape: Mutex<()>,
}

/// A gauge or counter family whose series are a shared value plus the cells of their writers;
/// register it as a [`Collector`]. Clones share everything.
#[derive(Clone)]
pub(crate) struct CellFamily {
    shared: Shared,
    label_names: Arc<[String]>,
    registry: Arc<Registry>,
}

impl fmt::Debug for CellFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CellFamily")
            .field("labels", &self.label_names)
            .finish_non_exhaustive()
    }
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these (sums and vector edits only).
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CellFamily {
    /// A gauge family (writers' cells are discarded when they end).
    pub(crate) fn gauge(vec: IntGaugeVec, label_names: &[&str]) -> Self {
        Self::new(Shared::Gauge(vec), label_names)
    }

    /// A counter family (writers' cells are folded into the shared counter when they end).
    pub(crate) fn counter(vec: IntCounterVec, label_names: &[&str]) -> Self {
        Self::new(Shared::Counter(vec), label_names)
    }

    fn new(shared: Shared, label_names: &[&str]) -> Self {
        Self {
            shared,
            label_names: label_names.iter().map(|name| (*name).to_string()).collect(),
            registry: Arc::default(),
        }
    }

    /// The series of `values` (in the order the family's labels were declared).
    pub(crate) fn series(&self, values: &[&str]) -> CellSeries {
        let shared = match &self.shared {
            Shared::Gauge(vec) => SharedSeries::Gauge(vec.with_label_values(values)),
            Shared::Counter(vec) => SharedSeries::Counter(vec.with_label_values(values)),
        };
        let mut key: SeriesKey = self
            .label_names
            .iter()
            .zip(values)
            .map(|(name, value)| (name.clone(), (*value).to_string()))
            .collect();
        key.sort();
        let cells = Arc::clone(locked(&self.registry.series).entry(key).or_default());
        CellSeries {
            shared,
            cells,
            registry: Arc::clone(&self.registry),
        }
    }
}

impl Collector for CellFamily {
    fn desc(&self) -> Vec<&Desc> {
        match &self.shared {
            Shared::Gauge(vec) => vec.desc(),
            Shared::Counter(vec) => vec.desc(),
        }
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _scrape = locked(&self.registry.scrape);
        let mut families = match &self.shared {
            Shared::Gauge(vec) => vec.collect(),
            Shared::Counter(vec) => vec.collect(),
        };
        let series = locked(&self.registry.series);
        for family in &mut families {
            for metric in family.mut_metric() {
                let mut key: SeriesKey = metric
                    .get_label()
                    .iter()
                    .map(|pair| (pair.name().to_string(), pair.value().to_string()))
                    .collect();
                key.sort();
                let Some(cells) = series.get(&key) else {
                    continue;
                };
                let extra = sum(cells);
                // The values stay far below 2^53: exact as f64.
                #[allow(clippy::cast_precision_loss)]
                let extra = extra as f64;
                match &self.shared {
                    Shared::Gauge(_) => {
                        let mut gauge = prometheus::proto::Gauge::default();
                        gauge.set_value(metric.get_gauge().get_value() + extra);
                        metric.set_gauge(gauge);
                    }
                    Shared::Counter(_) => {
                        let mut counter = prometheus::proto::Counter::default();
                        counter.set_value(metric.get_counter().get_value() + extra);
                        metric.set_counter(counter);
                    }
                }
            }
        }
        families
    }
}

fn sum(cells: &CellList) -> i64 {
    locked(cells)
        .iter()
        .map(|cell| cell.load(Ordering::Relaxed))
        .sum()
}

/// One series of a [`CellFamily`]: its shared value and a source of [`Cell`]s. Clones share
/// everything.
#[derive(Clone)]
pub(crate) struct CellSeries {
    shared: SharedSeries,
    cells: CellList,
    registry: Arc<Registry>,
}

impl fmt::Debug for CellSeries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CellSeries")
            .field("value", &self.get())
            .finish_non_exhaustive()
    }
}

impl CellSeries {
    /// A new cell of this series, for one writer (a lock of this series' list and a push).
    pub(crate) fn cell(&self) -> Cell {
        let value = Arc::new(AtomicI64::new(0));
        locked(&self.cells).push(Arc::clone(&value));
        Cell {
            value,
            series: self.clone(),
        }
    }

    /// Adds one to the shared value (an atomic read-modify-write; tests count this way).
    #[cfg(test)]
    pub(crate) fn inc(&self) {
        match &self.shared {
            SharedSeries::Gauge(gauge) => gauge.inc(),
            SharedSeries::Counter(counter) => counter.inc(),
        }
    }

    /// The series' value as a scrape would show it: the shared value plus every live cell.
    pub(crate) fn get(&self) -> i64 {
        let _scrape = locked(&self.registry.scrape);
        self.shared.get() + sum(&self.cells)
    }
}

/// One writer's part of a series (see the [module docs](self)). Only its owner changes it, so a
/// change is a load and a store, with no locked instruction.
pub(crate) struct Cell {
    value: Arc<AtomicI64>,
    series: CellSeries,
}

impl fmt::Debug for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cell")
            .field("value", &self.value.load(Ordering::Relaxed))
            .finish()
    }
}

impl Cell {
    /// Adds `delta` (negative for a gauge going down).
    pub(crate) fn add(&mut self, delta: i64) {
        // Not `fetch_add`: this cell has one writer (`&mut self`), so no change can come in
        // between; readers only load.
        let value = self.value.load(Ordering::Relaxed);
        self.value.store(value + delta, Ordering::Relaxed);
    }

    pub(crate) fn inc(&mut self) {
        self.add(1);
    }

    pub(crate) fn dec(&mut self) {
        self.add(-1);
    }

    /// Sets a gauge's part to zero (its writer dropped what it counted).
    pub(crate) fn reset(&mut self) {
        self.value.store(0, Ordering::Relaxed);
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        let remove = |cells: &CellList| {
            let mut cells = locked(cells);
            if let Some(at) = cells.iter().position(|cell| Arc::ptr_eq(cell, &self.value)) {
                cells.swap_remove(at);
            }
        };
        match &self.series.shared {
            // A counter keeps what its writer counted: moved into the shared value while no
            // scrape reads, so it is counted once.
            SharedSeries::Counter(counter) => {
                let _scrape = locked(&self.series.registry.scrape);
                remove(&self.series.cells);
                let counted = self.value.load(Ordering::Relaxed);
                counter.inc_by(u64::try_from(counted).unwrap_or(0));
            }
            // A gauge's part ends with its writer.
            SharedSeries::Gauge(_) => remove(&self.series.cells),
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{Opts, Registry};

    use super::*;

    fn registered(family: &CellFamily) -> Registry {
        let registry = Registry::new();
        registry
            .register(Box::new(family.clone()))
            .expect("register");
        registry
    }

    fn scraped(registry: &Registry, labels: &[(&str, &str)]) -> f64 {
        let families = registry.gather();
        let family = families.first().expect("one family");
        let metric = family
            .get_metric()
            .iter()
            .find(|metric| {
                labels.iter().all(|(name, value)| {
                    metric
                        .get_label()
                        .iter()
                        .any(|pair| pair.name() == *name && pair.value() == *value)
                })
            })
            .expect("the series");
        if family.get_field_type() == prometheus::proto::MetricType::COUNTER {
            metric.get_counter().get_value()
        } else {
            metric.get_gauge().get_value()
        }
    }

    #[test]
    fn a_scrape_adds_every_live_cell_to_the_shared_gauge() {
        let vec = IntGaugeVec::new(Opts::new("cells_gauge", "x"), &["kind", "event_type"])
            .expect("gauge");
        let family = CellFamily::gauge(vec, &["kind", "event_type"]);
        let registry = registered(&family);
        let series = family.series(&["Pod", "CREATE"]);
        let other = family.series(&["Pod", "DELETE"]);
        let (mut one, mut two) = (series.cell(), series.cell());
        one.inc();
        one.inc();
        two.inc();
        two.dec();
        two.dec();
        series.inc();
        let mut elsewhere = other.cell();
        elsewhere.add(5);
        assert_eq!(series.get(), 2, "2 - 1 + the shared 1");
        assert_eq!(
            scraped(&registry, &[("kind", "Pod"), ("event_type", "CREATE")]),
            2.0
        );
        assert_eq!(
            scraped(&registry, &[("kind", "Pod"), ("event_type", "DELETE")]),
            5.0
        );
        drop(one);
        assert_eq!(series.get(), 0, "a gauge's part ends with its writer");
        two.reset();
        assert_eq!(series.get(), 1);
    }

    #[test]
    fn a_counters_cell_is_kept_when_its_writer_ends() {
        let vec = IntCounterVec::new(Opts::new("cells_counter", "x"), &["kind"]).expect("counter");
        let family = CellFamily::counter(vec, &["kind"]);
        let registry = registered(&family);
        let series = family.series(&["Pod"]);
        let mut cell = series.cell();
        for _ in 0..3 {
            cell.inc();
        }
        series.inc();
        assert_eq!(scraped(&registry, &[("kind", "Pod")]), 4.0);
        drop(cell);
        assert_eq!(
            scraped(&registry, &[("kind", "Pod")]),
            4.0,
            "folded, not lost"
        );
        assert_eq!(series.get(), 4);
        assert!(
            locked(&series.cells).is_empty(),
            "no cell left behind for the ended writer"
        );
    }

    #[test]
    fn cells_written_on_other_threads_are_all_counted() {
        let vec = IntCounterVec::new(Opts::new("cells_threads", "x"), &["kind"]).expect("counter");
        let family = CellFamily::counter(vec, &["kind"]);
        let series = family.series(&["Pod"]);
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let mut cell = series.cell();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        cell.inc();
                    }
                    cell
                })
            })
            .collect();
        let cells: Vec<Cell> = writers
            .into_iter()
            .map(|writer| writer.join().expect("writer"))
            .collect();
        assert_eq!(series.get(), 40_000, "live cells");
        drop(cells);
        assert_eq!(series.get(), 40_000, "folded");
    }

    #[test]
    fn a_scraped_counter_never_goes_back_while_writers_end() {
        let vec =
            IntCounterVec::new(Opts::new("cells_monotonic", "x"), &["kind"]).expect("counter");
        let family = CellFamily::counter(vec, &["kind"]);
        let registry = registered(&family);
        let series = family.series(&["Pod"]);
        let writers = std::thread::spawn(move || {
            for round in 0..2_000 {
                let mut cell = series.cell();
                for _ in 0..(round % 7) + 1 {
                    cell.inc();
                }
                // Dropped here: folded into the shared counter while scrapes run.
            }
        });
        let mut last = 0.0;
        while !writers.is_finished() {
            let now = scraped(&registry, &[("kind", "Pod")]);
            assert!(now >= last, "scraped {now} after {last}");
            last = now;
        }
        writers.join().expect("writers");
        let expected: u32 = (0..2_000u32).map(|round| round % 7 + 1).sum();
        assert_eq!(scraped(&registry, &[("kind", "Pod")]), f64::from(expected));
    }
}
