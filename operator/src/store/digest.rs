//! A digest of a cache's `(uid, resourceVersion)` set for the diagnostics endpoint:
//! [`kubeapp_sdk::diagnostics::cache_checksum`] of the cached objects, so that a tool can compute
//! the same digest of a list from the apiserver and compare.

use kubeapp_sdk::diagnostics::cache_checksum;

use super::cache::SharedCache;

/// How many objects `cache` holds and their digest, as 16 hex digits.
pub(crate) fn cache_digest(cache: &SharedCache) -> (u64, String) {
    let state = cache.read();
    let checksum = cache_checksum(state.objects.values().map(|object| {
        let meta = object.metadata();
        (
            meta.uid.as_deref().unwrap_or_default(),
            meta.resource_version.as_deref().unwrap_or_default(),
        )
    }));
    let objects = u64::try_from(state.objects.len()).unwrap_or(u64::MAX);
    (objects, checksum)
}
