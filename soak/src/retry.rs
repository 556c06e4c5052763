//! Requests of the tool that ride out apiserver restarts: retried with backoff while the error is
//! transient (no connection, 5xx, 429), for a bounded time.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::SoakError;

/// The first pause after a failed request; doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// True when `error` may go away by itself: the apiserver is restarting or overloaded.
pub fn is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        // Connection refused or reset, TLS or HTTP failures while the apiserver restarts.
        _ => true,
    }
}

/// Runs `request` until it succeeds, fails with a non-transient error, or `patience` has passed.
///
/// # Errors
///
/// [`SoakError::Kube`] for a non-transient error (the caller handles the codes it expects, e.g.
/// 404 or 409, before they get here by matching on the result of the closure), and
/// [`SoakError::GaveUp`] when the errors were transient for longer than `patience`.
pub async fn retrying<T, F, Fut>(
    action: impl Fn() -> String,
    patience: Duration,
    mut request: F,
) -> Result<T, SoakError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match request().await {
            Ok(value) => return Ok(value),
            Err(source) if !is_transient(&source) => {
                return Err(SoakError::Kube {
                    action: action(),
                    source,
                });
            }
            Err(source) if started.elapsed() >= patience => {
                return Err(SoakError::GaveUp {
                    action: action(),
                    waited: started.elapsed(),
                    source,
                });
            }
            Err(source) => {
                tracing::debug!(action = %action(), error = %source, "transient error, retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}
