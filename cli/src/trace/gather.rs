//! Reads what `kubeapp trace` reports: the object, the objects its components or phases applied
//! (from its status), the Events about it, and the kubeapp Leases (shard rings, leader
//! election). Only the object itself must be readable; anything else that cannot be read is
//! named in [`Trace::unreadable`] and the rest is still reported.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kubeapp::components::{ComponentObject, ComponentsSummary, Readiness, readiness};
use kubeapp::ha::election::ELECTION_LABEL;
use kubeapp::ha::sharding::RING_LABEL;
use kubeapp::ha::sharding::assignment::{owned_by, slot_of_uid};
use kubeapp::operator::controller::failures::{HANDLER_FAILED, HANDLER_GAVE_UP};
use serde_json::Value;

use super::model::{
    ChildView, ComponentView, ConditionView, EventView, LeaderView, ObjectView, OwnerView,
    PhasesView, ShardView, Trace, TransitionView, WriteView, verdict,
};
use super::{TraceArgs, TraceError};
use crate::target::Target;

/// The reason of a phase machine's transition Events.
const PHASE_CHANGED: &str = "PhaseChanged";

/// Reads and judges the object `target` names.
pub async fn gather(target: &Target, args: &TraceArgs) -> Result<Trace, TraceError> {
    let stored = target
        .api
        .get(&target.name)
        .await
        .map_err(|source| TraceError::Read {
            object: target.described.clone(),
            source,
        })?;
    let object = serde_json::to_value(&stored).unwrap_or(Value::Null);
    let mut unreadable = Vec::new();
    let uid = stored.metadata.uid.clone().unwrap_or_default();
    let events = match read_events(target, &uid).await {
        Ok(events) => events,
        Err(error) => {
            unreadable.push(format!("Events: {error}"));
            Vec::new()
        }
    };
    let failures: Vec<EventView> = events
        .iter()
        .filter(|e| e.reason == HANDLER_FAILED || e.reason == HANDLER_GAVE_UP)
        .cloned()
        .collect();
    let last_status_write = last_status_write(&stored);
    let (verdict, why) = verdict(&object, &failures, last_status_write.as_ref());
    let status = &object["status"];
    let phases = match status["phase"].as_str() {
        Some(phase) => {
            let mut history: Vec<TransitionView> = events
                .iter()
                .filter(|e| e.reason == PHASE_CHANGED)
                .map(|e| TransitionView {
                    time: e.time,
                    change: e.note.clone(),
                })
                .collect();
            history.reverse();
            let outputs: Vec<ComponentObject> =
                serde_json::from_value(status["outputs"].clone()).unwrap_or_default();
            Some(PhasesView {
                phase: phase.to_string(),
                history,
                analysis: Some(status["analysis"].clone()).filter(|a| !a.is_null()),
                outputs: children(target, &outputs, &mut unreadable).await,
            })
        }
        None => None,
    };
    let components = match serde_json::from_value::<ComponentsSummary>(status["components"].clone())
    {
        Ok(summary) => components(target, &summary, &mut unreadable).await,
        Err(_) => Vec::new(),
    };
    let owner = owner(target, args, &uid, &events, &mut unreadable).await;
    let mut shown = events;
    shown.truncate(args.events);
    let operator = match &args.diagnostics {
        Some(url) => match super::operator::read(url, args.token_file.as_deref(), target).await {
            Ok(view) => Some(view),
            Err(error) => {
                unreadable.push(format!("operator diagnostics: {error}"));
                None
            }
        },
        None => None,
    };
    Ok(Trace {
        object: ObjectView {
            api_version: target.resource.api_version.clone(),
            kind: target.resource.kind.clone(),
            name: target.name.clone(),
            namespace: target.namespace.clone(),
            uid,
            generation: stored.metadata.generation,
            observed_generation: status["observedGeneration"].as_i64(),
            deleting: stored
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|_| stored.metadata.finalizers.clone().unwrap_or_default()),
        },
        verdict,
        why,
        conditions: conditions(status),
        last_status_write,
        phases,
        components,
        failures,
        events: shown,
        owner,
        operator,
        unreadable,
    })
}

fn conditions(status: &Value) -> Vec<ConditionView> {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ConditionView {
            type_: text(&c["type"]),
            status: text(&c["status"]),
            reason: text(&c["reason"]),
            message: text(&c["message"]),
            observed_generation: c["observedGeneration"].as_i64(),
            last_transition_time: c["lastTransitionTime"]
                .as_str()
                .and_then(|t| t.parse().ok()),
        })
        .collect()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// The newest write to the status subresource that `managedFields` records.
fn last_status_write(object: &DynamicObject) -> Option<WriteView> {
    object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .filter_map(|f| {
            Some(WriteView {
                time: f.time.as_ref()?.0,
                manager: f.manager.clone().unwrap_or_default(),
            })
        })
        .max_by_key(|w| w.time)
}

/// The Events about the object (by uid), newest first. Events about a cluster-scoped object
/// live in `default`, where kube's recorder writes them.
async fn read_events(target: &Target, uid: &str) -> Result<Vec<EventView>, kube::Error> {
    let namespace = target.namespace.as_deref().unwrap_or("default");
    let api: Api<Event> = Api::namespaced(target.client.clone(), namespace);
    let list = api
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await?;
    let mut events: Vec<EventView> = list.items.iter().map(event_view).collect();
    events.sort_by_key(|e| std::cmp::Reverse(e.time));
    Ok(events)
}

fn event_view(event: &Event) -> EventView {
    let series = event.series.as_ref();
    let time = series
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let controller = event
        .reporting_component
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| event.source.as_ref().and_then(|s| s.component.clone()))
        .unwrap_or_default();
    let instance = event
        .reporting_instance
        .clone()
        .filter(|i| !i.is_empty())
        .or_else(|| event.source.as_ref().and_then(|s| s.host.clone()))
        .unwrap_or_default();
    EventView {
        time,
        type_: event.type_.clone().unwrap_or_default(),
        reason: event.reason.clone().unwrap_or_default(),
        action: event.action.clone().unwrap_or_default(),
        note: event.message.clone().unwrap_or_default(),
        count: series.and_then(|s| s.count).or(event.count).unwrap_or(1),
        reporter: if instance.is_empty() {
            controller
        } else {
            format!("{controller}/{instance}")
        },
    }
}

/// Each component of `summary` with the objects it applied, read now.
async fn components(
    target: &Target,
    summary: &ComponentsSummary,
    unreadable: &mut Vec<String>,
) -> Vec<ComponentView> {
    let mut names: Vec<&str> = Vec::new();
    for name in summary
        .objects
        .iter()
        .map(|o| o.component.as_str())
        .chain(summary.waiting.iter().map(String::as_str))
        .chain(summary.failed.iter().map(String::as_str))
    {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut views = Vec::new();
    for name in names {
        let objects: Vec<ComponentObject> = summary
            .objects
            .iter()
            .filter(|o| o.component == name)
            .cloned()
            .collect();
        let state = if summary.failed.iter().any(|f| f == name) {
            "failed"
        } else if summary.waiting.iter().any(|w| w == name) {
            "waiting"
        } else {
            "ready"
        };
        views.push(ComponentView {
            name: name.to_string(),
            state,
            children: children(target, &objects, unreadable).await,
        });
    }
    views
}

/// `objects` as read now, with their readiness by the components crate's built-in rules.
async fn children(
    target: &Target,
    objects: &[ComponentObject],
    unreadable: &mut Vec<String>,
) -> Vec<ChildView> {
    let mut views = Vec::new();
    for object in objects {
        let (group, version) = match object.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", object.api_version.as_str()),
        };
        let resource = ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            plural: object.plural.clone(),
        };
        let api: Api<DynamicObject> = match &object.namespace {
            Some(namespace) => Api::namespaced_with(target.client.clone(), namespace, &resource),
            None => Api::all_with(target.client.clone(), &resource),
        };
        let (readiness, reason) = match api.get_opt(&object.name).await {
            Ok(Some(found)) => {
                match readiness(&serde_json::to_value(&found).unwrap_or(Value::Null)) {
                    Readiness::Ready => ("Ready", String::new()),
                    Readiness::NotReady(why) => ("NotReady", why),
                    Readiness::Failed(why) => ("Failed", why),
                }
            }
            Ok(None) => ("Missing", "not found".to_string()),
            Err(error) => {
                unreadable.push(format!("{}/{}: {error}", object.kind, object.name));
                ("Unreadable", error.to_string())
            }
        };
        views.push(ChildView {
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            readiness,
            reason,
        });
    }
    views
}

/// Who acts on the object: the newest Event's reporter, and its owner by every kubeapp Lease
/// found in `--lease-namespace` (default: every namespace).
async fn owner(
    target: &Target,
    args: &TraceArgs,
    uid: &str,
    events: &[EventView],
    unreadable: &mut Vec<String>,
) -> OwnerView {
    let mut owner = OwnerView {
        last_reported_by: events
            .iter()
            .find(|e| !e.reporter.is_empty())
            .map(|e| e.reporter.clone()),
        ..OwnerView::default()
    };
    let api: Api<Lease> = match &args.lease_namespace {
        Some(namespace) => Api::namespaced(target.client.clone(), namespace),
        None => Api::all(target.client.clone()),
    };
    let now = Timestamp::now();
    match api.list(&ListParams::default().labels(RING_LABEL)).await {
        Ok(list) => owner.shards = shards(&list.items, uid, now),
        Err(error) => unreadable.push(format!("shard ring Leases: {error}")),
    }
    match api
        .list(&ListParams::default().labels(ELECTION_LABEL))
        .await
    {
        Ok(list) => {
            owner.leaders = list
                .items
                .iter()
                .map(|lease| LeaderView {
                    lease: format!(
                        "{}/{}",
                        lease.metadata.namespace.as_deref().unwrap_or(""),
                        lease.metadata.name.as_deref().unwrap_or("")
                    ),
                    holder: live_holder(lease, now),
                })
                .collect();
        }
        Err(error) => unreadable.push(format!("leader-election Leases: {error}")),
    }
    owner
}

/// The holder of `lease` if its claim is current at `now`: renewed within its duration. (By
/// this machine's wall clock, which the replicas never use to judge each other; a trace is a
/// snapshot for people.)
fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref()?.0;
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds?));
    (renewed.checked_add(duration).ok()? > now).then_some(holder)
}

/// The object's slot and owner in each ring among `leases` (labelled [`RING_LABEL`]).
fn shards(leases: &[Lease], uid: &str, now: Timestamp) -> Vec<ShardView> {
    let mut rings: Vec<(String, String)> = leases
        .iter()
        .filter_map(|l| {
            let ring = l.metadata.labels.as_ref()?.get(RING_LABEL)?.clone();
            Some((l.metadata.namespace.clone().unwrap_or_default(), ring))
        })
        .collect();
    rings.sort();
    rings.dedup();
    let slot = slot_of_uid(uid);
    rings
        .into_iter()
        .map(|(namespace, ring)| {
            let mut members: Vec<String> = leases
                .iter()
                .filter(|l| {
                    l.metadata.namespace.as_deref() == Some(namespace.as_str())
                        && l.metadata
                            .labels
                            .as_ref()
                            .and_then(|labels| labels.get(RING_LABEL))
                            == Some(&ring)
                })
                .filter_map(|l| live_holder(l, now))
                .collect();
            members.sort();
            members.dedup();
            let owner = members
                .iter()
                .find(|m| owned_by(&members, m).contains(slot))
                .cloned();
            ShardView {
                ring,
                namespace,
                slot,
                owner,
                members,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    use super::*;

    fn lease(ring: &str, holder: &str, renewed: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(format!("{ring}-{holder}")),
                namespace: Some("ops".into()),
                labels: Some([(RING_LABEL.to_string(), ring.to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(renewed)),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn the_owner_is_the_live_member_whose_share_holds_the_objects_slot() {
        let now = Timestamp::now();
        let stale = now - SignedDuration::from_secs(60);
        let leases = [
            lease("web-shards", "b", now),
            lease("web-shards", "a", now),
            lease("web-shards", "gone", stale),
        ];
        let members = vec!["a".to_string(), "b".to_string()];
        for uid in ["3f1c", "9a2e-41", "0000", "a-uid-that-is-long"] {
            let views = shards(&leases, uid, now);
            assert_eq!(views.len(), 1);
            let view = &views[0];
            assert_eq!(view.members, members, "the expired Lease is not a member");
            let owner = view.owner.as_deref().expect("an owner");
            assert!(owned_by(&members, owner).contains(slot_of_uid(uid)));
            assert_eq!(view.slot, slot_of_uid(uid));
        }
    }

    #[test]
    fn a_released_or_expired_lease_has_no_holder() {
        let now = Timestamp::now();
        let mut released = lease("r", "a", now);
        released.spec.as_mut().expect("spec").holder_identity = None;
        assert_eq!(live_holder(&released, now), None);
        let expired = lease("r", "a", now - SignedDuration::from_secs(16));
        assert_eq!(live_holder(&expired, now), None);
        assert_eq!(
            live_holder(&lease("r", "a", now), now).as_deref(),
            Some("a")
        );
    }
}
