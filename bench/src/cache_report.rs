//! The results of `kubeapp-bench cache` ([`crate::cache`]): per contender, kubeapp's ratios
//! against each kube-runtime contender, a Markdown table and a JSON document.

use std::fmt::Write as _;

use kube::api::DynamicObject;
use serde::Serialize;

use crate::cache_contender::CacheObject;
use crate::report::Machine;

const MIB: f64 = 1024.0 * 1024.0;

/// The size of one cached object's JSON as the apiserver returns it (read back with a GET and
/// serialised compactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ObjectSize {
    /// Bytes of the whole object.
    pub json_bytes: usize,
    /// Bytes without `metadata.managedFields`.
    pub json_bytes_without_managed_fields: usize,
}

impl ObjectSize {
    /// The size of `object`'s compact JSON, with and without `metadata.managedFields`.
    ///
    /// # Errors
    ///
    /// When the object cannot be serialised.
    pub fn of(object: &DynamicObject) -> Result<Self, serde_json::Error> {
        let json_bytes = serde_json::to_vec(object)?.len();
        let mut stripped = object.clone();
        stripped.metadata.managed_fields = None;
        Ok(Self {
            json_bytes,
            json_bytes_without_managed_fields: serde_json::to_vec(&stripped)?.len(),
        })
    }
}

/// One cache contender's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheResult {
    /// The contender.
    pub contender: String,
    /// Objects cached.
    pub objects: usize,
    /// Which round of the run this was (1 to `--rounds`).
    pub round: usize,
    /// From the process's start until its cache held the whole first list, in seconds.
    pub sync_seconds: f64,
    /// CPU time (user + system) the process used from its start until it synced, in seconds.
    pub sync_cpu_seconds: f64,
    /// RSS of the same process with 0 objects cached, in MiB.
    pub empty_rss_mib: f64,
    /// RSS after the sync settled, in MiB.
    pub steady_rss_mib: f64,
    /// Peak RSS (`VmHWM`) from the start through the sync, in MiB.
    pub peak_rss_mib: f64,
    /// `(steady RSS - RSS with 0 objects) / objects`, in bytes.
    pub bytes_per_object: f64,
    /// Peak RSS from just before the forced re-list until it settled, in MiB.
    pub relist_peak_rss_mib: f64,
    /// RSS after the re-list settled, in MiB.
    pub relist_rss_mib: f64,
    /// `relist_peak_rss_mib / steady_rss_mib`: the re-list spike (target: at most 1.5).
    pub relist_spike: f64,
    /// From the apiserver's restart until the contender's watch was open again after its
    /// re-list, in seconds (includes the watcher's backoff).
    pub relist_seconds: f64,
}

impl CacheResult {
    /// The figures of one contender from its raw readings (bytes and seconds).
    #[allow(clippy::too_many_arguments)] // Each reading is a separate measurement.
    pub fn new(
        contender: &str,
        objects: usize,
        sync_seconds: f64,
        empty_rss: u64,
        steady_rss: u64,
        peak_rss: u64,
        relist_peak_rss: u64,
        relist_rss: u64,
        relist_seconds: f64,
    ) -> Self {
        let steady_rss_mib = steady_rss as f64 / MIB;
        let relist_peak_rss_mib = relist_peak_rss as f64 / MIB;
        Self {
            contender: contender.to_string(),
            objects,
            round: 1,
            sync_seconds,
            sync_cpu_seconds: 0.0,
            empty_rss_mib: empty_rss as f64 / MIB,
            steady_rss_mib,
            peak_rss_mib: peak_rss as f64 / MIB,
            bytes_per_object: (steady_rss as f64 - empty_rss as f64) / objects.max(1) as f64,
            relist_peak_rss_mib,
            relist_rss_mib: relist_rss as f64 / MIB,
            relist_spike: relist_peak_rss_mib / steady_rss_mib,
            relist_seconds,
        }
    }
}

/// kubeapp's cache figures divided by those of a kube-runtime contender.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheRatio {
    /// The contender divided (`kubeapp` or `kubeapp-projection`).
    pub ours: String,
    /// The contender it is divided by.
    pub against: String,
    /// Time to sync.
    pub sync: f64,
    /// CPU time used until synced.
    pub sync_cpu: f64,
    /// Steady RSS.
    pub steady_rss: f64,
    /// Peak RSS through the sync.
    pub peak_rss: f64,
    /// Bytes per object (issue #40's target against `kube-runtime-stripped` for ConfigMap-sized
    /// objects: at most 0.8).
    pub bytes_per_object: f64,
    /// Peak RSS during the re-list.
    pub relist_peak_rss: f64,
}

/// The whole cache report.
#[derive(Clone, Debug, Serialize)]
pub struct CacheReport {
    /// Where it ran.
    pub machine: Machine,
    /// The kind cached.
    pub object: CacheObject,
    /// Objects cached.
    pub objects: usize,
    /// The JSON size of one object as the apiserver returns it.
    pub object_size: ObjectSize,
    /// Seconds the creates took (once, before the contenders ran; for Pods, with their status
    /// writes).
    pub create_seconds: f64,
    /// Per contender and round, in the order they ran.
    pub contenders: Vec<CacheResult>,
    /// Each contender's median of each figure over its rounds (its one run when there was one
    /// round).
    pub medians: Vec<CacheResult>,
    /// Each ratio the report gives (kubeapp against both kube-runtime contenders, the projection
    /// against kubeapp and the stripped kube-runtime) whose two contenders ran, of the medians.
    pub ratios: Vec<CacheRatio>,
}

/// The ratios reported (each contender divided by its peer), in the report's order: kubeapp
/// against kube-runtime as it comes and stripped; kubeapp's projection against its full cache and
/// the stripped kube-runtime.
const RATIOS: [(&str, &str); 4] = [
    ("kubeapp", "kube-runtime"),
    ("kubeapp", "kube-runtime-stripped"),
    ("kubeapp-projection", "kubeapp"),
    ("kubeapp-projection", "kube-runtime-stripped"),
];

impl CacheReport {
    /// A report of `contenders` (cached `object`s of `object_size`) with kubeapp's ratio against
    /// each kube-runtime contender.
    pub fn new(
        machine: Machine,
        object: CacheObject,
        object_size: ObjectSize,
        create_seconds: f64,
        contenders: Vec<CacheResult>,
    ) -> Self {
        let medians = medians(&contenders);
        let find = |name: &str| medians.iter().find(|c| c.contender == name);
        let ratios = RATIOS
            .iter()
            .filter_map(|&(ours, against)| find(ours).zip(find(against)))
            .map(|(ours, peer)| CacheRatio {
                ours: ours.contender.clone(),
                against: peer.contender.clone(),
                sync: ours.sync_seconds / peer.sync_seconds,
                sync_cpu: ours.sync_cpu_seconds / peer.sync_cpu_seconds,
                steady_rss: ours.steady_rss_mib / peer.steady_rss_mib,
                peak_rss: ours.peak_rss_mib / peer.peak_rss_mib,
                bytes_per_object: ours.bytes_per_object / peer.bytes_per_object,
                relist_peak_rss: ours.relist_peak_rss_mib / peer.relist_peak_rss_mib,
            })
            .collect();
        Self {
            machine,
            object,
            objects: contenders.first().map_or(0, |c| c.objects),
            object_size,
            create_seconds,
            contenders,
            medians,
            ratios,
        }
    }

    /// The report as Markdown tables.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} objects of kind `{}` cached (created in {:.1} s), {} bytes of JSON each ({} without \
             managedFields); {} CPUs, {:.0} GiB\n",
            self.objects,
            self.object,
            self.create_seconds,
            self.object_size.json_bytes,
            self.object_size.json_bytes_without_managed_fields,
            self.machine.cpus,
            self.machine.memory_gib
        );
        let rounds = self.contenders.iter().map(|c| c.round).max().unwrap_or(1);
        let _ = writeln!(
            out,
            "| contender | round | time to sync (s) | CPU to sync (s) | RSS, 0 objects (MiB) | steady RSS (MiB) | peak RSS (MiB) | bytes/object | re-list peak RSS (MiB) | re-list peak / steady |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let medians = self.medians.iter().filter(|_| rounds > 1);
        for (c, round) in self
            .contenders
            .iter()
            .map(|c| (c, c.round.to_string()))
            .chain(medians.map(|c| (c, "median".to_string())))
        {
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.2}x |",
                c.contender,
                round,
                c.sync_seconds,
                c.sync_cpu_seconds,
                c.empty_rss_mib,
                c.steady_rss_mib,
                c.peak_rss_mib,
                c.bytes_per_object,
                c.relist_peak_rss_mib,
                c.relist_spike
            );
        }
        if !self.ratios.is_empty() {
            let of = if rounds > 1 {
                format!(" (of the medians over {rounds} rounds)")
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "\n| ratio{of} | time to sync | CPU to sync | steady RSS | peak RSS | bytes/object | re-list peak RSS |\n|---|---:|---:|---:|---:|---:|---:|"
            );
        }
        for r in &self.ratios {
            let _ = writeln!(
                out,
                "| {} / {} | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x |",
                r.ours,
                r.against,
                r.sync,
                r.sync_cpu,
                r.steady_rss,
                r.peak_rss,
                r.bytes_per_object,
                r.relist_peak_rss
            );
        }
        out
    }
}

/// Each contender's median of each figure over its results, in the order the contenders first
/// ran (with an even count, the mean of the middle two).
fn medians(results: &[CacheResult]) -> Vec<CacheResult> {
    let mut names: Vec<&str> = Vec::new();
    for result in results {
        if !names.contains(&result.contender.as_str()) {
            names.push(&result.contender);
        }
    }
    names
        .into_iter()
        .filter_map(|name| {
            let runs: Vec<&CacheResult> = results.iter().filter(|r| r.contender == name).collect();
            let first = *runs.first()?;
            let median = |field: fn(&CacheResult) -> f64| {
                crate::report::median(runs.iter().map(|r| field(r)).collect())
            };
            Some(CacheResult {
                contender: first.contender.clone(),
                objects: first.objects,
                round: runs.len(),
                sync_seconds: median(|r| r.sync_seconds),
                sync_cpu_seconds: median(|r| r.sync_cpu_seconds),
                empty_rss_mib: median(|r| r.empty_rss_mib),
                steady_rss_mib: median(|r| r.steady_rss_mib),
                peak_rss_mib: median(|r| r.peak_rss_mib),
                bytes_per_object: median(|r| r.bytes_per_object),
                relist_peak_rss_mib: median(|r| r.relist_peak_rss_mib),
                relist_rss_mib: median(|r| r.relist_rss_mib),
                relist_spike: median(|r| r.relist_spike),
                relist_seconds: median(|r| r.relist_seconds),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1024 * 1024;

    #[test]
    fn bytes_per_object_spike_and_ratios() {
        // 100 objects; 10 MiB empty, 20 MiB steady: 104,857.6 bytes per object.
        let ours = CacheResult::new(
            "kubeapp",
            100,
            2.0,
            10 * M,
            20 * M,
            30 * M,
            25 * M,
            20 * M,
            1.0,
        );
        assert_eq!(ours.bytes_per_object, (10 * M) as f64 / 100.0);
        assert_eq!(ours.relist_spike, 1.25);
        let peer = CacheResult::new(
            "kube-runtime",
            100,
            4.0,
            10 * M,
            50 * M,
            60 * M,
            100 * M,
            50 * M,
            1.0,
        );
        let mut stripped = peer.clone();
        stripped.contender = "kube-runtime-stripped".to_string();
        stripped.bytes_per_object /= 2.0;
        let size = ObjectSize {
            json_bytes: 5_000,
            json_bytes_without_managed_fields: 3_000,
        };
        let report = CacheReport::new(
            Machine::detect(),
            CacheObject::Pod,
            size,
            1.0,
            vec![ours, peer, stripped],
        );
        assert_eq!(report.objects, 100);
        assert_eq!(report.ratios.len(), 2);
        let ratio = report.ratios[0].clone();
        assert_eq!(ratio.against, "kube-runtime");
        assert_eq!(ratio.sync, 0.5);
        assert_eq!(ratio.steady_rss, 0.4);
        assert_eq!(ratio.bytes_per_object, 0.25);
        assert_eq!(ratio.relist_peak_rss, 0.25);
        let table = report.table();
        assert!(
            table.contains(
                "| kubeapp | 1 | 2.00 | 0.00 | 10.0 | 20.0 | 30.0 | 104858 | 25.0 | 1.25x |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| kubeapp / kube-runtime | 0.50x | NaNx | 0.40x | 0.50x | 0.25x | 0.25x |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| kubeapp / kube-runtime-stripped | 0.50x | NaNx | 0.40x | 0.50x | 0.50x | 0.25x |"
            ),
            "{table}"
        );
        assert!(
            table.contains("kind `pod`") && table.contains("5000 bytes of JSON each (3000 without"),
            "{table}"
        );
    }

    #[test]
    fn rounds_are_listed_and_the_ratios_are_of_the_medians() {
        let run = |name: &str, round: usize, sync: f64, cpu: f64| {
            let mut result = CacheResult::new(name, 10, sync, M, 2 * M, 2 * M, 2 * M, 2 * M, 1.0);
            result.round = round;
            result.sync_cpu_seconds = cpu;
            result
        };
        let results = vec![
            run("kubeapp", 1, 3.0, 6.0),
            run("kube-runtime", 1, 4.0, 4.0),
            run("kube-runtime", 2, 2.0, 5.0),
            run("kubeapp", 2, 9.0, 2.0),
            run("kubeapp", 3, 1.0, 4.0),
            run("kube-runtime", 3, 8.0, 8.0),
        ];
        let size = ObjectSize {
            json_bytes: 10,
            json_bytes_without_managed_fields: 10,
        };
        let report = CacheReport::new(Machine::detect(), CacheObject::Bench, size, 1.0, results);
        let kubeapp = &report.medians[0];
        assert_eq!(
            (
                kubeapp.contender.as_str(),
                kubeapp.round,
                kubeapp.sync_seconds,
                kubeapp.sync_cpu_seconds
            ),
            ("kubeapp", 3, 3.0, 4.0)
        );
        assert_eq!(report.ratios[0].sync, 3.0 / 4.0);
        assert_eq!(report.ratios[0].sync_cpu, 4.0 / 5.0);
        let table = report.table();
        assert!(table.contains("| kubeapp | 2 | 9.00 | 2.00 |"), "{table}");
        assert!(
            table.contains("| kubeapp | median | 3.00 | 4.00 |"),
            "{table}"
        );
        assert!(table.contains("(of the medians over 3 rounds)"), "{table}");
    }

    #[test]
    fn the_projection_is_divided_by_the_full_cache_and_the_stripped_peer() {
        let result = |name: &str, steady_mib: u64| {
            CacheResult::new(
                name,
                100,
                1.0,
                10 * M,
                steady_mib * M,
                40 * M,
                40 * M,
                30 * M,
                1.0,
            )
        };
        let report = CacheReport::new(
            Machine::detect(),
            CacheObject::Pod,
            ObjectSize {
                json_bytes: 1,
                json_bytes_without_managed_fields: 1,
            },
            1.0,
            vec![
                result("kubeapp", 30),
                result("kubeapp-projection", 15),
                result("kube-runtime-stripped", 20),
            ],
        );
        let pairs: Vec<(&str, &str, f64)> = report
            .ratios
            .iter()
            .map(|r| (r.ours.as_str(), r.against.as_str(), r.bytes_per_object))
            .collect();
        assert_eq!(
            pairs,
            [
                ("kubeapp", "kube-runtime-stripped", 2.0),
                ("kubeapp-projection", "kubeapp", 0.25),
                ("kubeapp-projection", "kube-runtime-stripped", 0.5),
            ]
        );
        assert!(
            report.table().contains(
                "| kubeapp-projection / kubeapp | 1.00x | NaNx | 0.50x | 1.00x | 0.25x | 1.00x |"
            ),
            "{}",
            report.table()
        );
    }

    #[test]
    fn without_kubeapp_there_is_no_ratio() {
        let peer = CacheResult::new("kube-runtime", 10, 1.0, M, 2 * M, 2 * M, 2 * M, 2 * M, 1.0);
        let size = ObjectSize {
            json_bytes: 1,
            json_bytes_without_managed_fields: 1,
        };
        let report = CacheReport::new(Machine::detect(), CacheObject::Bench, size, 1.0, vec![peer]);
        assert!(report.ratios.is_empty());
        assert!(!report.table().contains("| ratio |"));
    }

    #[test]
    fn the_object_size_counts_managed_fields_apart() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "a",
                "managedFields": [{ "manager": "m", "operation": "Update" }]
            },
            "data": { "k": "v" }
        }))
        .expect("an object");
        let size = ObjectSize::of(&object).expect("serialises");
        let managed = r#","managedFields":[{"manager":"m","operation":"Update"}]"#.len();
        assert_eq!(
            size.json_bytes - size.json_bytes_without_managed_fields,
            managed
        );
        assert_eq!(
            size.json_bytes_without_managed_fields,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}"#
                .len()
        );
    }
}
