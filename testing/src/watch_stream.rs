//! One watch through the proxy: the apiserver's event lines pass, are dropped or are held back
//! as the faults of the watch's resource say, and the watch ends when a cut, an expiry or a
//! resume after a halt asks.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::{mpsc, watch};

use crate::faults::{WatchFaults, WatchFlow};
use crate::request::ResourceKey;
use crate::status::expired_watch_event;

/// Event lines queued towards the client: a few, so that a slow client slows the pump.
pub(crate) const CLIENT_QUEUE: usize = 16;

/// Pumps the apiserver's watch body to `client`, line by line, until either side ends or the
/// faults end the watch. The watch counts as open (in `faults.open`) while this runs.
pub(crate) async fn pump(
    mut upstream: kube::client::Body,
    resource: ResourceKey,
    faults: watch::Sender<WatchFaults>,
    client: mpsc::Sender<Bytes>,
) {
    let mut changes = faults.subscribe();
    let (epoch, expiry) = {
        let state = changes.borrow_and_update();
        (state.epoch, state.expiry(&resource))
    };
    let mut watch = OpenWatch::open(&faults, &resource);
    let mut partial = BytesMut::new();
    loop {
        let (flow, halted, ended, expired) = {
            let state = changes.borrow_and_update();
            (
                state.flows.get(&resource).copied(),
                state.halted,
                state.epoch != epoch,
                state.expiry(&resource) != expiry,
            )
        };
        if ended {
            return;
        }
        if expired {
            // The client re-lists: what was held back or withheld is superseded.
            let _ = client.send(expired_watch_event()).await;
            return;
        }
        if flow.is_none() && !halted {
            while let Some(line) = watch.release_one() {
                if client.send(line).await.is_err() {
                    return;
                }
            }
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            frame = upstream.frame(), if !halted => {
                let Some(Ok(frame)) = frame else {
                    // The apiserver ended the watch (or failed): the client re-watches from the
                    // last resourceVersion it saw, and the apiserver replays what it missed.
                    return;
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                partial.extend_from_slice(&data);
                while let Some(end) = partial.iter().position(|&byte| byte == b'\n') {
                    let line = partial.split_to(end + 1).freeze();
                    match flow {
                        None => {
                            if client.send(line).await.is_err() {
                                return;
                            }
                        }
                        Some(WatchFlow::Lagging) => watch.hold(line),
                        Some(WatchFlow::Withheld) => watch.drop_one(),
                    }
                }
            }
            () = client.closed() => return,
        }
    }
}

/// An open watch's lines held back, and its place in the proxy's counts: counted open while it
/// lives, and its held lines counted out when it ends, however it ends.
struct OpenWatch<'a> {
    faults: &'a watch::Sender<WatchFaults>,
    resource: &'a ResourceKey,
    held: VecDeque<Bytes>,
}

impl<'a> OpenWatch<'a> {
    fn open(faults: &'a watch::Sender<WatchFaults>, resource: &'a ResourceKey) -> Self {
        faults.send_modify(|state| *state.open.entry(resource.clone()).or_default() += 1);
        Self {
            faults,
            resource,
            held: VecDeque::new(),
        }
    }

    fn hold(&mut self, line: Bytes) {
        self.held.push_back(line);
        self.faults
            .send_modify(|state| *state.held.entry(self.resource.clone()).or_default() += 1);
    }

    fn release_one(&mut self) -> Option<Bytes> {
        let line = self.held.pop_front()?;
        self.faults.send_modify(|state| {
            if let Some(held) = state.held.get_mut(self.resource) {
                *held = held.saturating_sub(1);
            }
        });
        Some(line)
    }

    fn drop_one(&self) {
        self.faults
            .send_modify(|state| *state.dropped.entry(self.resource.clone()).or_default() += 1);
    }
}

impl Drop for OpenWatch<'_> {
    fn drop(&mut self) {
        let held = self.held.len();
        self.faults.send_modify(|state| {
            if let Some(open) = state.open.get_mut(self.resource) {
                *open = open.saturating_sub(1);
            }
            if let Some(count) = state.held.get_mut(self.resource) {
                *count = count.saturating_sub(held);
            }
        });
    }
}
