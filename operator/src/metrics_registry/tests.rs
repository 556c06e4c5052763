//! Unit tests of [`MetricsRegistry`]: one set per registry, typed clashes, prefixes.

use super::*;
use crate::action::ReconcileAction;

fn value(registry: &Registry, name: &str) -> f64 {
    registry
        .gather()
        .iter()
        .find(|family| family.name() == name)
        .map_or(0.0, |family| {
            family
                .get_metric()
                .iter()
                .map(|metric| metric.get_counter().get_value())
                .sum()
        })
}

#[test]
fn two_registries_in_one_process_do_not_share_counts() {
    let first = MetricsRegistry::new(Some("apart")).expect("first");
    let second = MetricsRegistry::new(Some("apart")).expect("second");
    first
        .controller()
        .for_kind("k")
        .action(ReconcileAction::Created)
        .events_total
        .inc();
    first.finalizer().patch_counter("k", "add", "success").inc();
    assert_eq!(value(first.registry(), "apart_informer_events_total"), 1.0);
    assert_eq!(
        value(
            first.registry(),
            "apart_opinionated_finalizer_patches_total"
        ),
        1.0
    );
    assert_eq!(value(second.registry(), "apart_informer_events_total"), 0.0);
    assert_eq!(
        value(
            second.registry(),
            "apart_opinionated_finalizer_patches_total"
        ),
        0.0
    );
    assert_eq!(second.finalizer().patches("k", "add", "success"), 0);
}

#[test]
fn clones_of_a_handle_count_into_one_series() {
    let metrics = MetricsRegistry::new(Some("shared")).expect("metrics");
    let (one, two) = (metrics.clone(), metrics.clone());
    for handle in [&one, &two] {
        handle
            .controller()
            .for_kind("k")
            .action(ReconcileAction::Created)
            .events_total
            .inc();
    }
    let families = metrics.registry().gather();
    let events = families
        .iter()
        .find(|family| family.name() == "shared_informer_events_total")
        .expect("registered");
    let created: Vec<f64> = events
        .get_metric()
        .iter()
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|label| label.name() == "event_type" && label.value() == "CREATE")
        })
        .map(|metric| metric.get_counter().get_value())
        .collect();
    assert_eq!(created, [2.0], "one CREATE series, counted by both clones");
}

#[test]
fn every_kubeapp_name_takes_the_prefix() {
    let metrics = MetricsRegistry::new(Some("pre")).expect("metrics");
    metrics.controller().for_kind("k").watch_events.inc();
    metrics
        .finalizer()
        .patch_counter("k", "add", "success")
        .inc();
    let families = metrics.registry().gather();
    assert!(!families.is_empty());
    for family in &families {
        assert!(family.name().starts_with("pre_"), "{}", family.name());
    }
    let unprefixed = MetricsRegistry::new(None).expect("metrics");
    unprefixed.controller().for_kind("k").watch_events.inc();
    assert_eq!(
        value(unprefixed.registry(), "kubernetes_watch_events_total"),
        1.0
    );
}

/// A user's set of two counters.
#[derive(Clone)]
struct Orders {
    placed: prometheus::IntCounter,
    cancelled: prometheus::IntCounter,
}

impl MetricSet for Orders {
    type Error = MetricsError;

    fn create(prefix: Option<&str>) -> Result<Self, MetricsError> {
        let counter = |name: &str| {
            prometheus::IntCounter::with_opts(
                prometheus::Opts::new(name, "Orders.").namespace(prefix.unwrap_or("")),
            )
            .map_err(MetricsError::named(name))
        };
        Ok(Self {
            placed: counter("orders_placed_total")?,
            cancelled: counter("orders_cancelled_total")?,
        })
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.placed.clone()),
            Box::new(self.cancelled.clone()),
        ]
    }
}

fn names(registry: &Registry) -> Vec<String> {
    let mut names: Vec<String> = registry
        .gather()
        .iter()
        .map(|family| family.name().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn a_set_is_created_and_registered_once_per_registry_under_its_prefix() {
    let metrics = MetricsRegistry::new(Some("shop")).expect("metrics");
    let first = metrics.set::<Orders>().expect("first");
    let again = metrics
        .set::<Orders>()
        .expect("asked again: no clash with itself");
    first.placed.inc();
    again.placed.inc();
    assert_eq!(first.placed.get(), 2, "one set");
    assert_eq!(
        names(metrics.registry()),
        ["shop_orders_cancelled_total", "shop_orders_placed_total"]
    );
    assert_eq!(value(metrics.registry(), "shop_orders_placed_total"), 2.0);
}

#[test]
fn two_handles_of_one_registry_hand_out_one_set_and_two_registries_share_nothing() {
    let metrics = MetricsRegistry::new(Some("shop")).expect("metrics");
    let (one, two) = (metrics.clone(), metrics.clone());
    one.set::<Orders>().expect("one").placed.inc();
    two.set::<Orders>().expect("two").placed.inc();
    assert_eq!(value(metrics.registry(), "shop_orders_placed_total"), 2.0);
    let other = MetricsRegistry::new(Some("shop")).expect("other");
    assert_eq!(other.set::<Orders>().expect("other's").placed.get(), 0);
    assert_eq!(value(other.registry(), "shop_orders_placed_total"), 0.0);
}

#[test]
fn the_built_in_sets_are_sets_of_the_registry() {
    let metrics = MetricsRegistry::new(Some("built_in")).expect("metrics");
    metrics
        .set::<ControllerMetrics>()
        .expect("controller set")
        .for_kind("k")
        .watch_events
        .inc();
    metrics.controller().for_kind("k").watch_events.inc();
    assert_eq!(
        value(metrics.registry(), "built_in_kubernetes_watch_events_total"),
        2.0,
        "set::<ControllerMetrics>() and controller() count into one series"
    );
    metrics
        .set::<FinalizerMetrics>()
        .expect("finalizer set")
        .patch_counter("k", "add", "success")
        .inc();
    assert_eq!(metrics.finalizer().patches("k", "add", "success"), 1);
}

#[test]
fn a_clash_is_a_typed_error_and_registers_nothing_of_the_set() {
    let metrics = MetricsRegistry::new(Some("shop")).expect("metrics");
    let foreign = prometheus::IntCounter::with_opts(prometheus::Opts::new(
        "shop_orders_cancelled_total",
        "Someone else's.",
    ))
    .expect("counter");
    metrics
        .registry()
        .register(Box::new(foreign))
        .expect("foreign");
    let error = metrics.set::<Orders>().err().expect("a clash");
    assert!(
        matches!(
            &error,
            MetricSetError::Clash { set, metric, .. }
                if set.ends_with("Orders") && metric == "shop_orders_cancelled_total"
        ),
        "{error:?}"
    );
    assert_eq!(
        names(metrics.registry()),
        ["shop_orders_cancelled_total"],
        "the set's first metric was unregistered again"
    );
    assert!(metrics.set::<Orders>().is_err(), "asking again fails again");
}

#[test]
fn an_invalid_prefix_is_refused() {
    for prefix in ["", "9lives", "with-dash", "sp ace"] {
        let err = MetricsRegistry::new(Some(prefix)).expect_err(prefix);
        assert!(
            matches!(&err, MetricsRegistryError::InvalidPrefix { prefix: p } if p == prefix),
            "{err:?}"
        );
    }
    assert!(MetricsRegistry::new(Some("my_app:x")).is_ok());
}
