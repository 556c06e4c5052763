//! Counting an operator's API requests from kube-apiserver's audit log.
//!
//! Why the audit log: it is the only place that records every request with the identity that
//! sent it, so the operator's requests can be told from the measuring tool's own without
//! guessing. The operator connects as the test control plane's admin ([`ADMIN_USER`]) or as a
//! ServiceAccount; the tool creates objects and watches through another identity
//! ([`DRIVER_USER`]). The [`POLICY_YAML`] logs only the requests of `admin` and of
//! ServiceAccounts, at the `Metadata` level, one event per request at `ResponseComplete` (plus
//! `ResponseStarted` for watches, which may never complete); the requests counted for a run are
//! the distinct audit IDs whose `requestReceivedTimestamp` lies in the run's window. Discovery
//! and other non-resource requests are counted too: they are the operator's.
//!
//! [`with_audit_log`] turns a [`TestEnvBuilder`] into one whose apiserver writes that log.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

pub use jiff::Timestamp;
use serde::Deserialize;

use crate::testenv::TestEnvBuilder;

/// The test control plane's admin: the identity of an operator run with the control plane's
/// kubeconfig.
pub const ADMIN_USER: &str = "admin";

/// The user a measuring tool drives the benchmark as (creates, watch, checks): not logged.
pub const DRIVER_USER: &str = "kubeapp-bench-driver";

/// The audit policy: the requests of `admin` and of ServiceAccounts at `Metadata` level,
/// nothing else.
pub const POLICY_YAML: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: [admin]
  - level: Metadata
    userGroups: [system:serviceaccounts]
  - level: None
";

/// The audit log's file name in the directory given to [`with_audit_log`].
pub const LOG_FILE: &str = "audit.log";

/// The audit policy's file name in the directory given to [`with_audit_log`].
pub const POLICY_FILE: &str = "audit-policy.yaml";

/// `builder` with an apiserver that writes the JSON audit log `dir/`[`LOG_FILE`] of the
/// requests [`POLICY_YAML`] selects (the policy is written to `dir/`[`POLICY_FILE`]); returns
/// the builder and the log's path. The log is written synchronously (`blocking` mode: no event
/// is dropped under load) and never rotated (the default would rotate at 100 MB, mid-run at
/// 20,000 objects).
///
/// # Errors
///
/// When the policy file cannot be written.
pub fn with_audit_log(
    builder: TestEnvBuilder,
    dir: &Path,
) -> Result<(TestEnvBuilder, PathBuf), AuditError> {
    let policy = dir.join(POLICY_FILE);
    std::fs::write(&policy, POLICY_YAML).map_err(|source| AuditError::Io {
        path: policy.clone(),
        source,
    })?;
    let log = dir.join(LOG_FILE);
    let builder = builder
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", log.display()))
        .apiserver_arg("--audit-log-format=json")
        .apiserver_arg("--audit-log-mode=blocking")
        .apiserver_arg("--audit-log-maxsize=100000");
    Ok((builder, log))
}

/// Reading or parsing the audit log failed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The log could not be read (or its policy written).
    #[error("reading the audit log {path}")]
    Io {
        /// The log file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not an audit event.
    #[error("{path}:{line}: not an audit event")]
    Parse {
        /// The log file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// The cause.
        source: serde_json::Error,
    },
}

/// The requests of one identity in a time window.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RequestCounts {
    /// Distinct requests.
    pub total: u64,
    /// Requests answered 409 Conflict (handled by retrying; reported, not an error).
    pub conflicts: u64,
    /// Requests answered with any other code >= 400.
    pub errors: u64,
    /// Requests by `verb resource[/subresource] code` (code `-` while a watch is still open).
    pub by_kind: BTreeMap<String, u64>,
}

impl RequestCounts {
    /// What failed, when any request was answered with an error other than 409 Conflict (a
    /// conflict is handled by retrying; any other error means the operator's writes or reads
    /// went wrong): `N requests of <who> failed; requests by kind: {...}`.
    pub fn failures(&self, who: &str) -> Option<String> {
        (self.errors > 0).then(|| {
            format!(
                "{} requests of {who} failed; requests by kind: {:?}",
                self.errors, self.by_kind
            )
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(rename = "auditID")]
    audit_id: String,
    verb: String,
    #[serde(default)]
    request_uri: String,
    user: User,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<ResponseStatus>,
    request_received_timestamp: Timestamp,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
}

#[derive(Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: u16,
}

impl Event {
    fn kind(&self) -> String {
        let target = match &self.object_ref {
            Some(r) if !r.resource.is_empty() && !r.subresource.is_empty() => {
                format!("{}/{}", r.resource, r.subresource)
            }
            Some(r) if !r.resource.is_empty() => r.resource.clone(),
            _ => self
                .request_uri
                .split('?')
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        let code = self
            .response_status
            .as_ref()
            .map_or_else(|| "-".to_string(), |s| s.code.to_string());
        format!("{} {target} {code}", self.verb)
    }
}

/// Waits until the audit log at `path` has not grown for `quiet` (`limit` at most): the
/// operator has stopped sending requests, so its trailing no-op reconciles and late writes are
/// counted.
pub async fn wait_quiet(path: &Path, quiet: std::time::Duration, limit: std::time::Duration) {
    let size = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let poll = (quiet / 5).max(std::time::Duration::from_millis(10));
    let deadline = std::time::Instant::now() + limit;
    let mut last = size();
    let mut since = std::time::Instant::now();
    while std::time::Instant::now() < deadline {
        tokio::time::sleep(poll).await;
        let now = size();
        if now != last {
            last = now;
            since = std::time::Instant::now();
        } else if since.elapsed() >= quiet {
            return;
        }
    }
}

/// Reads every complete audit event of the JSON audit log at `path`.
///
/// kube-apiserver ends every event with a newline. Text after the last newline is an event
/// still being written, or cut off when the apiserver was killed mid-write (a tool stops the
/// operator, whose closing watch is logged, then kills the control plane; or it reads the log
/// while the apiserver runs): it is left out, not an error.
fn events(path: &Path) -> Result<Vec<Event>, AuditError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuditError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    let mut events = Vec::new();
    for (index, line) in complete.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        events.push(
            serde_json::from_str(line).map_err(|source| AuditError::Parse {
                path: path.to_path_buf(),
                line: index + 1,
                source,
            })?,
        );
    }
    Ok(events)
}

/// A complete list+watch cycle of `user` on `resource` received from `from` on: the receive
/// times of its first `list` and of the first `watch` after it, or `None` when there is none
/// (yet). A list-then-watch client (kube-runtime's watcher) opens the watch only once the list
/// with all its pages is done, so the watch marks the end of a re-list.
///
/// # Errors
///
/// When the file cannot be read or a line is not an audit event.
pub fn list_then_watch(
    path: &Path,
    user: &str,
    resource: &str,
    from: Timestamp,
) -> Result<Option<(Timestamp, Timestamp)>, AuditError> {
    let events = events(path)?;
    let ours = |e: &&Event, verb: &str, after: Timestamp| {
        e.user.username == user
            && e.verb == verb
            && e.request_received_timestamp >= after
            && e.object_ref
                .as_ref()
                .is_some_and(|r| r.resource == resource && r.subresource.is_empty())
    };
    let Some(list) = events
        .iter()
        .filter(|e| ours(e, "list", from))
        .map(|e| e.request_received_timestamp)
        .min()
    else {
        return Ok(None);
    };
    Ok(events
        .iter()
        .filter(|e| ours(e, "watch", list))
        .map(|e| e.request_received_timestamp)
        .min()
        .map(|watch| (list, watch)))
}

/// Counts `user`'s requests received in `[from, to]` in the JSON audit log at `path`.
///
/// # Errors
///
/// When the file cannot be read or a line is not an audit event.
pub fn count_requests(
    path: &Path,
    user: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<RequestCounts, AuditError> {
    let mut seen = HashSet::new();
    let mut counts = RequestCounts::default();
    for event in events(path)? {
        let received = event.request_received_timestamp;
        if event.user.username != user || received < from || received > to {
            continue;
        }
        // A watch has a ResponseStarted and (once closed) a ResponseComplete event: count it once.
        if !seen.insert(event.audit_id.clone()) {
            continue;
        }
        counts.total += 1;
        match event.response_status.as_ref().map(|s| s.code) {
            Some(409) => counts.conflicts += 1,
            Some(code) if code >= 400 => counts.errors += 1,
            _ => {}
        }
        *counts.by_kind.entry(event.kind()).or_default() += 1;
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, user: &str, verb: &str, sub: &str, code: Option<u16>, at: &str) -> String {
        let status = code.map_or(String::new(), |c| {
            format!(r#","responseStatus":{{"code":{c}}}"#)
        });
        format!(
            r#"{{"kind":"Event","auditID":"{id}","stage":"ResponseComplete","requestURI":"/apis/x","verb":"{verb}","user":{{"username":"{user}"}},"objectRef":{{"resource":"benchobjects","subresource":"{sub}"}},"requestReceivedTimestamp":"{at}"{status}}}"#
        )
    }

    #[test]
    fn counts_one_users_requests_in_the_window_once_each() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let lines = [
            line(
                "a",
                "admin",
                "patch",
                "status",
                Some(200),
                "2026-01-01T00:00:01.000000Z",
            ),
            line(
                "b",
                "admin",
                "patch",
                "",
                Some(409),
                "2026-01-01T00:00:02.000000Z",
            ),
            line(
                "c",
                "admin",
                "get",
                "",
                Some(404),
                "2026-01-01T00:00:03.000000Z",
            ),
            line(
                "d",
                "other",
                "patch",
                "",
                Some(200),
                "2026-01-01T00:00:03.000000Z",
            ),
            line(
                "e",
                "admin",
                "patch",
                "",
                Some(200),
                "2026-01-01T00:00:09.000000Z",
            ),
            line(
                "f",
                "admin",
                "watch",
                "",
                None,
                "2026-01-01T00:00:04.000000Z",
            ),
            line(
                "f",
                "admin",
                "watch",
                "",
                Some(200),
                "2026-01-01T00:00:04.000000Z",
            ),
        ];
        std::fs::write(&path, lines.join("\n") + "\n").expect("write");
        let from: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let to: Timestamp = "2026-01-01T00:00:05Z".parse().expect("ts");
        let counts = count_requests(&path, "admin", from, to).expect("counts");
        assert_eq!(counts.total, 4);
        assert_eq!(counts.conflicts, 1);
        assert_eq!(counts.errors, 1);
        assert_eq!(counts.by_kind["patch benchobjects/status 200"], 1);
        assert_eq!(counts.by_kind["watch benchobjects -"], 1);
        let failures = counts.failures("the operator").expect("one error");
        assert!(
            failures.starts_with("1 requests of the operator failed; requests by kind: {"),
            "{failures}"
        );
        assert_eq!(RequestCounts::default().failures("x"), None);
    }

    #[test]
    fn a_relist_is_the_first_list_from_then_on_and_the_first_watch_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let at = |s: u8| format!("2026-01-01T00:00:{s:02}.000000Z");
        let mut lines = vec![
            line("a", "admin", "list", "", Some(200), &at(1)),
            line("b", "admin", "watch", "", Some(200), &at(2)),
            line("c", "other", "list", "", Some(200), &at(4)),
            line("d", "admin", "watch", "", Some(200), &at(5)),
            line("e", "admin", "list", "status", Some(200), &at(5)),
        ];
        std::fs::write(&path, lines.join("\n") + "\n").expect("write");
        let from: Timestamp = at(3).parse().expect("ts");
        let found = list_then_watch(&path, "admin", "benchobjects", from).expect("read");
        assert_eq!(found, None, "no list of admin after 3 s yet");
        lines.push(line("f", "admin", "list", "", Some(200), &at(6)));
        lines.push(line("g", "admin", "list", "", Some(200), &at(7)));
        std::fs::write(&path, lines.join("\n") + "\n").expect("write");
        let found = list_then_watch(&path, "admin", "benchobjects", from).expect("read");
        assert_eq!(found, None, "listed, no watch after it yet");
        lines.push(line("h", "admin", "watch", "", None, &at(8)));
        std::fs::write(&path, lines.join("\n") + "\n").expect("write");
        let found = list_then_watch(&path, "admin", "benchobjects", from).expect("read");
        let expected = (at(6).parse().expect("ts"), at(8).parse().expect("ts"));
        assert_eq!(found, Some(expected));
    }

    #[test]
    fn an_event_cut_off_at_the_end_is_left_out_but_a_bad_line_before_it_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let at = "2026-01-01T00:00:01.000000Z";
        let whole = line("a", "admin", "patch", "status", Some(200), at);
        let cut = line("b", "admin", "watch", "", Some(200), at);
        // The apiserver was killed while it wrote the second event.
        let text = format!("{whole}\n{}", &cut[..cut.len() / 2]);
        std::fs::write(&path, text).expect("write");
        let counts = count_requests(&path, "admin", Timestamp::MIN, Timestamp::MAX)
            .expect("the cut-off event is left out");
        assert_eq!(counts.total, 1);
        std::fs::write(&path, format!("{}\n{whole}\n", &cut[..10])).expect("write");
        let err = count_requests(&path, "admin", Timestamp::MIN, Timestamp::MAX)
            .expect_err("a bad complete line");
        assert!(err.to_string().contains("audit.log:1"), "{err}");
    }

    #[test]
    fn a_line_that_is_no_event_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        std::fs::write(&path, "{}\n").expect("write");
        let err = count_requests(&path, "admin", Timestamp::MIN, Timestamp::MAX)
            .expect_err("not an event");
        assert!(err.to_string().contains("audit.log:1"), "{err}");
    }
}
