//! The series dispatch changes on every event, written through [`Cell`]s (see
//! [`metric_cells`](crate::metric_cells)): a kind's events and queue depth by the lanes, under
//! their lock ([`LaneCounts`], in the kind's state), and the ongoing events and handler calls by
//! each worker ([`WorkerGauges`]). Either way one writer per cell, so no locked instruction.

use crate::action::ReconcileAction;
use crate::metric_cells::Cell;
use crate::metrics::KindMetrics;

/// Where an action's series sit in the arrays below (the order of `KindMetrics::action`).
fn slot(action: ReconcileAction) -> usize {
    match action {
        ReconcileAction::Created => 0,
        ReconcileAction::Updated => 1,
        ReconcileAction::Deleted => 2,
        ReconcileAction::Resynced => 3,
    }
}

fn per_action(mut cell: impl FnMut(ReconcileAction) -> Cell) -> [Cell; 4] {
    [
        cell(ReconcileAction::Created),
        cell(ReconcileAction::Updated),
        cell(ReconcileAction::Deleted),
        cell(ReconcileAction::Resynced),
    ]
}

/// A kind's `informer_events_total` and `informer_queue_depth`, changed only under the lanes'
/// lock (they live in the state it guards).
#[derive(Debug)]
pub(super) struct LaneCounts {
    events: [Cell; 4],
    queue_depth: Cell,
}

impl LaneCounts {
    pub(super) fn new(metrics: &KindMetrics) -> Self {
        Self {
            events: per_action(|action| metrics.action(action).events_total.cell()),
            queue_depth: metrics.queue_depth.cell(),
        }
    }

    /// An informer event of `action` arrived.
    pub(super) fn event(&mut self, action: ReconcileAction) {
        self.events[slot(action)].inc();
    }

    /// An item was pushed into a lane; `merged` when it merged another away (the depth stays).
    pub(super) fn pushed(&mut self, merged: bool) {
        if !merged {
            self.queue_depth.inc();
        }
    }

    /// A worker took a queued event.
    pub(super) fn taken(&mut self) {
        self.queue_depth.dec();
    }

    /// The lanes were emptied.
    pub(super) fn cleared(&mut self) {
        self.queue_depth.reset();
    }
}

/// A worker's `ongoing_reconcile_events` and `ongoing_reconcile_processes`, by action.
pub(super) struct WorkerGauges {
    events: [Cell; 4],
    calls: [Cell; 4],
}

impl WorkerGauges {
    pub(super) fn new(metrics: &KindMetrics) -> Self {
        Self {
            events: per_action(|action| metrics.action(action).ongoing_events.cell()),
            calls: per_action(|action| metrics.action(action).ongoing_processes.cell()),
        }
    }

    pub(super) fn event_started(&mut self, action: ReconcileAction) {
        self.events[slot(action)].inc();
    }

    pub(super) fn event_ended(&mut self, action: ReconcileAction) {
        self.events[slot(action)].dec();
    }

    pub(super) fn call_started(&mut self, action: ReconcileAction) {
        self.calls[slot(action)].inc();
    }

    pub(super) fn call_ended(&mut self, action: ReconcileAction) {
        self.calls[slot(action)].dec();
    }
}
