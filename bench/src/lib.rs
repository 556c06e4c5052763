//! # kubeapp-bench
//!
//! kubeapp's end-to-end benchmark. `kubeapp-bench` starts a real kube-apiserver + etcd per run,
//! creates N objects of a bench kind, and measures how each contender reconciles them: the time
//! until every object is done, watch events per second, the contender's peak RSS and its API
//! requests per object; it fails a contender that does not reconcile everything or whose
//! requests fail. The contenders are child processes:
//!
//! - `kubeapp-bench-kubeapp`: kubeapp's simple App, opinionated reconciler;
//! - `kubeapp-bench-kube-runtime`: kube-runtime's `Controller` and `finalizer` helper;
//! - the grafana-app-sdk operator in `bench/go-operator`, built by the tool ([`gobuild`]);
//! - `kubeapp-bench-floor`: a plain client doing the same two writes per object.
//!
//! Each contender's reconcile calls per object are read from its `/metrics` ([`scrape`]; the
//! kube-runtime contender and the floor serve theirs with [`contender_metrics`]). With
//! `--identity service-account` the contenders run as a ServiceAccount with a token
//! ([`identity`]), with `--etcd-fsync` etcd flushes its writes: the "real cluster" figures.
//!
//! `kubeapp-bench cache` ([`cache`], [`cache_report`]) caches many objects (the bench kind, or
//! Pods with a full spec and status: `--object pod`) in kubeapp's shared-informer store and in
//! kube-runtime's reflector store, as it comes and with `managedFields` stripped (the binaries
//! `kubeapp-bench-cache-kubeapp`, `kubeapp-bench-cache-kube-runtime` and
//! `kubeapp-bench-cache-kube-runtime-stripped`, [`cache_contender`]): time to sync, RSS, bytes
//! per object, and the peak RSS of a forced re-list.
//!
//! `kubeapp-bench latency` ([`latency`]) measures, under steady churn, how long one update waits
//! from its answer until the contender's handler starts for it (p50, p99, max), for kubeapp and
//! kube-runtime; the contenders log their calls with [`call_log`].
//!
//! Modules: [`kind`] (the bench kind), [`contender_cli`] (the contender binaries' flags and
//! client), [`contender`], [`tracker`] (the tool's watch), [`run`] (one measured run),
//! [`report`] (medians, ratios, table, JSON). Child processes with their RSS and CPU, requests
//! per identity from the audit log and the `/metrics` reading come from the engine that
//! `kubeapp bench` uses too, `kubeapp::sdk::benchmark`.

pub mod cache;
pub mod cache_contender;
pub mod cache_report;
pub mod call_log;
pub mod contender;
pub mod contender_cli;
pub mod contender_metrics;
pub mod gobuild;
pub mod identity;
pub mod kind;
pub mod latency;
pub mod report;
pub mod run;
pub mod scrape;
pub mod tracker;
