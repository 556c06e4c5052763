//! The pause after a failed `accept`, growing while failures repeat.
//!
//! `accept` fails mostly when the process is out of file descriptors (`EMFILE`) or the system is
//! (`ENFILE`): the connection stays in the listen backlog, so retrying at once fails again and
//! the loop spins, logging every time. Pausing, doubling up to a maximum, keeps the CPU and the
//! log quiet until descriptors free up; the first successful accept resets the pause.
//! [`AcceptBackoff::accept`] is that loop, shared by the Runner's two servers.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Pauses between failed accepts: `min`, doubling with each failure in a row, at most `max`.
#[derive(Debug)]
pub(crate) struct AcceptBackoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl AcceptBackoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            next: min,
        }
    }

    /// The pause after one more failure in a row.
    pub(crate) fn failed(&mut self) -> Duration {
        let pause = self.next.min(self.max);
        // At least 1 ms from the second failure on, so a zero minimum cannot spin.
        self.next = (pause * 2).max(Duration::from_millis(1)).min(self.max);
        pause
    }

    /// An accept succeeded: the next failure pauses `min` again.
    pub(crate) fn succeeded(&mut self) {
        self.next = self.min;
    }

    /// The next connection on `listener`, pausing after each failed accept (one warning naming
    /// `server` per failure); `None` once `stop` is cancelled, also during a pause.
    pub(crate) async fn accept(
        &mut self,
        listener: &TcpListener,
        stop: &CancellationToken,
        server: &'static str,
    ) -> Option<(TcpStream, SocketAddr)> {
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return None,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok(accepted) => {
                    self.succeeded();
                    return Some(accepted);
                }
                Err(err) => {
                    let pause = self.failed();
                    tracing::warn!(%err, ?pause, server, "accept failed; pausing before the next accept");
                    tokio::select! {
                        () = stop.cancelled() => return None,
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_maximum_and_reset_after_a_success() {
        let mut backoff = AcceptBackoff::new(Duration::from_millis(5), Duration::from_millis(30));
        let pauses: Vec<_> = (0..5).map(|_| backoff.failed().as_millis()).collect();
        assert_eq!(pauses, [5, 10, 20, 30, 30]);
        backoff.succeeded();
        assert_eq!(backoff.failed(), Duration::from_millis(5));
    }

    #[test]
    fn a_zero_minimum_still_pauses_from_the_second_failure_on() {
        let mut backoff = AcceptBackoff::new(Duration::ZERO, Duration::from_millis(8));
        let pauses: Vec<_> = (0..6).map(|_| backoff.failed().as_millis()).collect();
        assert_eq!(pauses, [0, 1, 2, 4, 8, 8]);
    }
}
