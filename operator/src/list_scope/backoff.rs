//! The informer's backoff around `kube_runtime::watcher`: after each error the next request waits
//! kube-runtime's default backoff (exponential from 0.8 s, doubling up to 30 s, with jitter), and
//! the backoff starts over only once data arrives.
//!
//! kube-runtime's own `StreamBackoff` starts over on any `Ok` item. After a failed list the
//! watcher starts again from its empty state and yields `Ok(Event::Init)` before it lists again,
//! so with `StreamBackoff` a list that keeps failing (no RBAC to list the kind, a missing CRD) is
//! retried about once a second forever. Here `Init` does not count as data: a list page, its end,
//! or a watch event does.

use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use kube::runtime::watcher::{DefaultBackoff, Event};

use super::RawWatch as RawEvents;

/// The delay after an error when a backoff strategy has no more to give (kube-runtime's default
/// never ends; this is its cap).
const LONGEST_DELAY: Duration = Duration::from_secs(30);

/// `raw` with a pause after each error that grows until data arrives; see the [module docs](self).
pub(super) fn backoff_until_data(raw: RawEvents) -> RawEvents {
    backoff_until_data_with(raw, DefaultBackoff::default)
}

/// [`backoff_until_data`] with the strategy `fresh` makes (a new one each time data arrives).
pub(super) fn backoff_until_data_with<B>(raw: RawEvents, fresh: fn() -> B) -> RawEvents
where
    B: Iterator<Item = Duration> + Send + 'static,
{
    struct State<B> {
        raw: RawEvents,
        backoff: B,
        fresh: fn() -> B,
        pause: Option<Duration>,
    }
    let state = State {
        raw,
        backoff: fresh(),
        fresh,
        pause: None,
    };
    let stream: BoxStream<'static, _> = futures::stream::unfold(state, |mut state| async move {
        if let Some(delay) = state.pause.take() {
            tokio::time::sleep(delay).await;
        }
        let item = state.raw.next().await?;
        match &item {
            Err(_) => state.pause = Some(state.backoff.next().unwrap_or(LONGEST_DELAY)),
            // The watcher (re)starts a list: nothing arrived yet.
            Ok(Event::Init) => {}
            Ok(_) => state.backoff = (state.fresh)(),
        }
        Some((item, state))
    })
    .boxed();
    stream
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;
    use std::sync::{Arc, Mutex};
    use tokio::time::Instant;

    /// Any watcher error: the backoff does not look at it.
    fn forbidden() -> watcher::Error {
        watcher::Error::NoResourceVersion
    }

    /// A source behaving as kube-runtime's watcher does when every list fails: `Init`, then the
    /// error, over and over; it records when each list was made.
    fn failing_lists(times: Arc<Mutex<Vec<Instant>>>) -> RawEvents {
        futures::stream::iter(0..)
            .map(move |n| {
                if n % 2 == 0 {
                    Ok(Event::Init)
                } else {
                    times.lock().expect("times").push(Instant::now());
                    Err(forbidden())
                }
            })
            .boxed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_that_keeps_failing_is_retried_with_growing_gaps() {
        let times = Arc::new(Mutex::new(Vec::new()));
        let mut events = backoff_until_data(failing_lists(times.clone()));
        for _ in 0..14 {
            let _ = events.next().await.expect("the watcher never ends");
        }
        let times = times.lock().expect("times").clone();
        let gaps: Vec<f64> = times
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_secs_f64())
            .collect();
        assert_eq!(gaps.len(), 6, "{gaps:?}");
        // Each delay is 0.8 s * 2^n stretched by a jitter factor in [1, 2).
        assert!(gaps.iter().all(|&gap| gap >= 0.8), "{gaps:?}");
        for pair in gaps.windows(3) {
            assert!(pair[2] > pair[0], "gaps must grow: {gaps:?}");
        }
        assert!(gaps[4] >= 4.0 * gaps[0], "gaps must grow: {gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn data_starts_the_backoff_over() {
        let fixed = || [Duration::from_secs(1), Duration::from_secs(2)].into_iter();
        let raw = futures::stream::iter([
            Err(forbidden()),
            Ok(Event::Init),
            Err(forbidden()),
            Ok(Event::InitDone),
            Err(forbidden()),
            Ok(Event::Init),
        ])
        .boxed();
        let mut events = backoff_until_data_with(raw, fixed);
        let start = Instant::now();
        let mut at = Vec::new();
        while events.next().await.is_some() {
            at.push((Instant::now() - start).as_secs());
        }
        // 1 s after the first error, 2 s after the second (Init is no data), then InitDone resets
        // the backoff: 1 s after the third error.
        assert_eq!(at, [0, 1, 1, 3, 3, 4]);
    }
}
