//! SIGINT and SIGTERM, as one stream of names.

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGINT and SIGTERM handlers, installed for the life of the program (while installed, the
/// signals no longer terminate it).
#[derive(Debug)]
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    /// Installs both handlers.
    ///
    /// # Errors
    ///
    /// When a handler cannot be installed.
    pub fn install() -> anyhow::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("handling SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("handling SIGTERM")?,
        })
    }

    /// The name of the next signal received.
    pub async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}
