//! The faults the proxy can inject, and the state every connection reads them from.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::request::{ResourceKey, ResourceRequest};

/// What the proxy answers to a write it matches, in the apiserver's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteFault {
    /// 409 Conflict (reason `Conflict`), as for an update from a stale resourceVersion. The
    /// write does not reach the apiserver.
    Conflict,
    /// 429 Too Many Requests with `Retry-After`, as the apiserver's flow control answers. The
    /// write does not reach the apiserver.
    TooManyRequests {
        /// The wait the answer asks for (rounded up to whole seconds, at least 1).
        retry_after: Duration,
    },
    /// 500 Internal Server Error (reason `InternalError`). The write does not reach the
    /// apiserver.
    InternalError,
    /// 504 Gateway Timeout (reason `Timeout`), as when storage did not answer in time. The write
    /// does not reach the apiserver.
    Timeout,
    /// The write reaches the apiserver and is applied, but the connection is closed before the
    /// answer reaches the client: the client sees a transport error for a write that landed.
    ResponseLost,
}

impl fmt::Display for WriteFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Conflict => f.write_str("409 Conflict"),
            Self::TooManyRequests { retry_after } => {
                write!(f, "429 Too Many Requests (retry after {retry_after:?})")
            }
            Self::InternalError => f.write_str("500 Internal Server Error"),
            Self::Timeout => f.write_str("504 Timeout"),
            Self::ResponseLost => f.write_str("response lost"),
        }
    }
}

/// How the events of one resource's watches flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchFlow {
    /// Dropped, until a release ends the watches with 410 so that clients re-list.
    Withheld,
    /// Held back in order, until a catch-up delivers them.
    Lagging,
}

/// The watch side of the faults, shared through a `tokio::sync::watch` channel so that every
/// open watch reacts at once when it changes.
#[derive(Clone, Debug, Default)]
pub(crate) struct WatchFaults {
    /// Bumped to end every open watch (a cut, or a resume after a halt).
    pub(crate) epoch: u64,
    /// Resources whose events do not flow.
    pub(crate) flows: HashMap<ResourceKey, WatchFlow>,
    /// Bumped per resource to end its open watches with 410 Expired.
    pub(crate) expiries: HashMap<ResourceKey, u64>,
    /// While set, nothing flows: requests wait, watches deliver nothing.
    pub(crate) halted: bool,
    /// Bumped by every resume after a halt: a request that waited through one is dropped.
    pub(crate) resumes: u64,
    /// Open watches per resource.
    pub(crate) open: HashMap<ResourceKey, usize>,
    /// Events held back per resource, not yet delivered (summed over its watches).
    pub(crate) held: HashMap<ResourceKey, usize>,
    /// Events dropped per resource while withheld, over the proxy's life.
    pub(crate) dropped: HashMap<ResourceKey, u64>,
}

impl WatchFaults {
    /// How many times the resource's watches were ended with 410.
    pub(crate) fn expiry(&self, resource: &ResourceKey) -> u64 {
        self.expiries.get(resource).copied().unwrap_or(0)
    }
}

/// One write rule: the next `remaining` writes to `resource` (every resource when `None`) get
/// `fault`; or, with `at`, only the write with that number.
#[derive(Clone, Debug)]
struct WriteRule {
    resource: Option<ResourceKey>,
    at: Option<u64>,
    fault: WriteFault,
    remaining: usize,
}

/// What happened to one write that reached the proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Forwarded; the apiserver answered with this status, and the client got the answer.
    Forwarded(u16),
    /// Answered by the proxy with a fault; the apiserver never saw it (for
    /// [`WriteFault::ResponseLost`], the apiserver's status is in [`Lost`](Self::Lost)).
    Faulted(WriteFault),
    /// Forwarded; the apiserver answered with this status, and the answer was dropped.
    Lost(u16),
    /// Forwarded (or not) when the proxy halted; the client never got the answer.
    Halted(Option<u16>),
    /// The apiserver could not be reached.
    Unreachable,
}

/// One write the proxy saw, in order.
#[derive(Clone, Debug)]
pub struct WriteRecord {
    /// Its place among the writes, from 1.
    pub seq: u64,
    /// Its method.
    pub method: http::Method,
    /// What it wrote to.
    pub request: ResourceRequest,
    /// What happened to it.
    pub outcome: WriteOutcome,
}

impl fmt::Display for WriteRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let request = &self.request;
        write!(f, "#{} {} {}", self.seq, self.method, request.resource)?;
        if let Some(namespace) = &request.namespace {
            write!(f, " {namespace}/")?;
        } else {
            f.write_str(" ")?;
        }
        f.write_str(request.name.as_deref().unwrap_or("(collection)"))?;
        if let Some(subresource) = &request.subresource {
            write!(f, "/{subresource}")?;
        }
        match &self.outcome {
            WriteOutcome::Forwarded(status) => write!(f, ": {status}"),
            WriteOutcome::Faulted(fault) => write!(f, ": {fault} (injected)"),
            WriteOutcome::Lost(status) => write!(f, ": {status}, response lost (injected)"),
            WriteOutcome::Halted(Some(status)) => write!(f, ": {status}, then halted"),
            WriteOutcome::Halted(None) => f.write_str(": halted before forwarding"),
            WriteOutcome::Unreachable => f.write_str(": apiserver unreachable"),
        }
    }
}

/// The write side of the faults: rules, the log, and the write to halt after.
#[derive(Debug, Default)]
pub(crate) struct WriteBook {
    rules: Vec<WriteRule>,
    /// Writes admitted so far (the last one's number).
    admitted: u64,
    /// Finished writes, in the order they finished.
    pub(crate) log: Vec<WriteRecord>,
    pub(crate) halt_after: Option<u64>,
}

impl WriteBook {
    /// Adds a rule: the next `times` writes to `resource` get `fault`.
    pub(crate) fn add_rule(
        &mut self,
        resource: Option<ResourceKey>,
        fault: WriteFault,
        times: usize,
    ) {
        self.rules.push(WriteRule {
            resource,
            at: None,
            fault,
            remaining: times,
        });
    }

    /// Adds a rule: the write numbered `seq` gets `fault`.
    pub(crate) fn add_rule_at(&mut self, seq: u64, fault: WriteFault) {
        self.rules.push(WriteRule {
            resource: None,
            at: Some(seq),
            fault,
            remaining: 1,
        });
    }

    /// Drops every rule not used up yet.
    pub(crate) fn clear_rules(&mut self) {
        self.rules.clear();
    }

    /// The next write's number, and the fault of the first rule it matches (used up by one).
    pub(crate) fn admit(&mut self, request: &ResourceRequest) -> (u64, Option<WriteFault>) {
        self.admitted += 1;
        let seq = self.admitted;
        let fault = self
            .rules
            .iter_mut()
            .find(|rule| {
                rule.remaining > 0
                    && rule.at.is_none_or(|at| at == seq)
                    && rule
                        .resource
                        .as_ref()
                        .is_none_or(|resource| *resource == request.resource)
            })
            .map(|rule| {
                rule.remaining -= 1;
                rule.fault
            });
        self.rules
            .retain(|rule| rule.remaining > 0 && rule.at.is_none_or(|at| at > seq));
        (seq, fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_to(plural: &str) -> ResourceRequest {
        ResourceRequest::parse(
            &http::Method::POST,
            &format!("/api/v1/namespaces/ns/{plural}"),
            None,
        )
        .expect("a write")
    }

    #[test]
    fn a_rule_faults_as_many_matching_writes_as_it_says_then_lets_them_through() {
        let mut book = WriteBook::default();
        book.add_rule(
            Some(ResourceKey::new("", "configmaps")),
            WriteFault::Conflict,
            2,
        );
        assert_eq!(book.admit(&write_to("secrets")).1, None);
        assert_eq!(
            book.admit(&write_to("configmaps")).1,
            Some(WriteFault::Conflict)
        );
        assert_eq!(
            book.admit(&write_to("configmaps")).1,
            Some(WriteFault::Conflict)
        );
        assert_eq!(book.admit(&write_to("configmaps")).1, None);
    }

    #[test]
    fn rules_apply_in_the_order_they_were_added() {
        let mut book = WriteBook::default();
        book.add_rule(None, WriteFault::InternalError, 1);
        book.add_rule(None, WriteFault::Timeout, 1);
        assert_eq!(
            book.admit(&write_to("pods")).1,
            Some(WriteFault::InternalError)
        );
        assert_eq!(book.admit(&write_to("pods")).1, Some(WriteFault::Timeout));
        assert_eq!(book.admit(&write_to("pods")).1, None);
    }
}
