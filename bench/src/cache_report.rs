//! The results of `kubeapp-bench cache` ([`crate::cache`]): per contender, kubeapp /
//! kube-runtime ratios, a Markdown table and a JSON document.

use std::fmt::Write as _;

use serde::Serialize;

use crate::report::Machine;

const MIB: f64 = 1024.0 * 1024.0;

/// One cache contender's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheResult {
    /// The contender.
    pub contender: String,
    /// Objects cached.
    pub objects: usize,
    /// From the process's start until its cache held the whole first list, in seconds.
    pub sync_seconds: f64,
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
            sync_seconds,
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

/// kubeapp's cache figures divided by kube-runtime's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheRatio {
    /// Time to sync.
    pub sync: f64,
    /// Steady RSS (target: at most 0.5).
    pub steady_rss: f64,
    /// Peak RSS through the sync.
    pub peak_rss: f64,
    /// Bytes per object.
    pub bytes_per_object: f64,
    /// Peak RSS during the re-list.
    pub relist_peak_rss: f64,
}

/// The whole cache report.
#[derive(Clone, Debug, Serialize)]
pub struct CacheReport {
    /// Where it ran.
    pub machine: Machine,
    /// Objects cached.
    pub objects: usize,
    /// Seconds the creates took (once, before the contenders ran).
    pub create_seconds: f64,
    /// Per contender.
    pub contenders: Vec<CacheResult>,
    /// kubeapp / kube-runtime (absent unless both ran).
    pub ratio: Option<CacheRatio>,
}

impl CacheReport {
    /// A report of `contenders` with the kubeapp / kube-runtime ratio.
    pub fn new(
        machine: Machine,
        objects: usize,
        create_seconds: f64,
        contenders: Vec<CacheResult>,
    ) -> Self {
        let find = |name| contenders.iter().find(|c| c.contender == name);
        let ratio = find("kubeapp")
            .zip(find("kube-runtime"))
            .map(|(ours, peer)| CacheRatio {
                sync: ours.sync_seconds / peer.sync_seconds,
                steady_rss: ours.steady_rss_mib / peer.steady_rss_mib,
                peak_rss: ours.peak_rss_mib / peer.peak_rss_mib,
                bytes_per_object: ours.bytes_per_object / peer.bytes_per_object,
                relist_peak_rss: ours.relist_peak_rss_mib / peer.relist_peak_rss_mib,
            });
        Self {
            machine,
            objects,
            create_seconds,
            contenders,
            ratio,
        }
    }

    /// The report as Markdown tables.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} objects cached (created in {:.1} s); {} CPUs, {:.0} GiB\n",
            self.objects, self.create_seconds, self.machine.cpus, self.machine.memory_gib
        );
        let _ = writeln!(
            out,
            "| contender | time to sync (s) | RSS, 0 objects (MiB) | steady RSS (MiB) | peak RSS (MiB) | bytes/object | re-list peak RSS (MiB) | re-list peak / steady |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for c in &self.contenders {
            let _ = writeln!(
                out,
                "| {} | {:.2} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.2}x |",
                c.contender,
                c.sync_seconds,
                c.empty_rss_mib,
                c.steady_rss_mib,
                c.peak_rss_mib,
                c.bytes_per_object,
                c.relist_peak_rss_mib,
                c.relist_spike
            );
        }
        if let Some(r) = &self.ratio {
            let _ = writeln!(
                out,
                "\n| ratio | time to sync | steady RSS | peak RSS | bytes/object | re-list peak RSS |\n|---|---:|---:|---:|---:|---:|"
            );
            let _ = writeln!(
                out,
                "| kubeapp / kube-runtime | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x |",
                r.sync, r.steady_rss, r.peak_rss, r.bytes_per_object, r.relist_peak_rss
            );
        }
        out
    }
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
        let report = CacheReport::new(Machine::detect(), 100, 1.0, vec![ours, peer]);
        let ratio = report.ratio.clone().expect("both ran");
        assert_eq!(ratio.sync, 0.5);
        assert_eq!(ratio.steady_rss, 0.4);
        assert_eq!(ratio.bytes_per_object, 0.25);
        assert_eq!(ratio.relist_peak_rss, 0.25);
        let table = report.table();
        assert!(
            table.contains("| kubeapp | 2.00 | 10.0 | 20.0 | 30.0 | 104858 | 25.0 | 1.25x |"),
            "{table}"
        );
        assert!(
            table.contains("| kubeapp / kube-runtime | 0.50x | 0.40x | 0.50x | 0.25x | 0.25x |"),
            "{table}"
        );
    }
}
