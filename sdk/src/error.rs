//! Printing an error with its causes, once each.
//!
//! # The rule every kubeapp error type follows
//!
//! An error that wraps another one either *returns* it from
//! [`source()`](std::error::Error::source) or *includes* its message in its own `Display`, never
//! both. kubeapp's types return it: their `Display` says what failed (`patching the finalizers
//! of Widget ns/a`), and the cause comes next in the chain. So print a kubeapp error the usual
//! way for a chain: `{:#}` with `anyhow`, a walk down `source()`, or [`ErrorChain`] here; a
//! bare `{}` shows the top level only. (`tests/error_chains.rs` holds every public error type of
//! the workspace to this rule.)
//!
//! # Foreign errors
//!
//! Some errors from other crates break the rule (`kube::Error::Api` prints its `Status` and also
//! returns it). [`ErrorChain`] therefore skips a cause whose message the text printed so far
//! already contains, so such a chain still reads once.
//!
//! ```
//! use kubeapp_sdk::error::ErrorChain;
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("reading the settings")]
//! struct Settings(#[source] std::io::Error);
//!
//! let error = Settings(std::io::Error::other("permission denied"));
//! assert_eq!(error.to_string(), "reading the settings");
//! assert_eq!(
//!     ErrorChain(&error).to_string(),
//!     "reading the settings: permission denied"
//! );
//! ```

use std::error::Error;
use std::fmt;

/// `error: cause: root cause` on one line, each message once (see the [module docs](self)).
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&error_chain(self.0))
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The text of [`ErrorChain`]: `error`'s message, then each cause's after `": "`, skipping a
/// cause whose message is empty or already in the text (a foreign error that restates its
/// source).
pub fn error_chain(error: &(dyn Error + '_)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !message.is_empty() && !text.contains(&message) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

/// Every level of `error`'s chain whose message contains the message of its own source: the
/// mistake the [rule](self#the-rule-every-kubeapp-error-type-follows) forbids, which makes a
/// walk down the chain print that text twice. Each entry is `"<message>" repeats "<source's
/// message>"`. Empty for a well-formed chain; for tests of error types.
pub fn restated_causes(error: &(dyn Error + '_)) -> Vec<String> {
    let mut found = Vec::new();
    let mut level: Option<&(dyn Error + '_)> = Some(error);
    while let Some(current) = level {
        let Some(source) = current.source() else {
            break;
        };
        let (message, cause) = (current.to_string(), source.to_string());
        if !cause.is_empty() && message.contains(&cause) {
            found.push(format!("{message:?} repeats {cause:?}"));
        }
        level = Some(source);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("middle: {0}")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn a_chain_prints_each_cause_once_and_restatements_are_found() {
        let error = Outer(Middle(std::io::Error::other("root")));
        assert_eq!(error_chain(&error), "outer: middle: root");
        assert_eq!(ErrorChain(&error).to_string(), "outer: middle: root");
        assert_eq!(
            restated_causes(&error),
            [r#""middle: root" repeats "root""#]
        );
        let io = std::io::Error::other("disk full");
        assert!(restated_causes(&io).is_empty());
        let fine = Outer(Middle(std::io::Error::other("")));
        assert!(
            restated_causes(&fine).is_empty(),
            "an empty message repeats nothing"
        );
    }
}
