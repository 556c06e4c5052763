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
//! Modules: [`kind`] (the bench kind), [`contender_cli`] (the contender binaries' flags and
//! client), [`contender`], [`process`] (child processes and peak RSS), [`tracker`] (the tool's
//! watch), [`audit`] (requests per identity from the audit log), [`run`] (one measured run),
//! [`report`] (medians, ratios, table, JSON).

pub mod audit;
pub mod cache;
pub mod cache_contender;
pub mod cache_report;
pub mod contender;
pub mod contender_cli;
pub mod contender_metrics;
pub mod gobuild;
pub mod identity;
pub mod kind;
pub mod process;
pub mod report;
pub mod run;
pub mod scrape;
pub mod tracker;
