//! A digest of a cache's `(uid, resourceVersion)` set for the diagnostics endpoint: two replicas
//! caching the same objects at the same versions show the same digest, whatever order their
//! caches hold them in (a per-object hash summed, so the order cannot matter). FNV-1a then a
//! 64-bit finalizer (both fixed by their definition, so the value is the same in every build):
//! a quick comparison for humans and tools, not a cryptographic one.

use std::hash::Hasher as _;

use super::cache::SharedCache;

/// How many objects `cache` holds and their digest, as 16 hex digits.
pub(crate) fn cache_digest(cache: &SharedCache) -> (u64, String) {
    let state = cache.read();
    let sum = state.objects.values().fold(0u64, |sum, object| {
        let meta = object.metadata();
        sum.wrapping_add(object_hash(
            meta.uid.as_deref().unwrap_or_default(),
            meta.resource_version.as_deref().unwrap_or_default(),
        ))
    });
    let objects = u64::try_from(state.objects.len()).unwrap_or(u64::MAX);
    (objects, format!("{sum:016x}"))
}

/// One object's hash: FNV-1a over `uid`, a separator, `resource_version`, then mixed so that
/// sums of similar inputs do not cancel out.
fn object_hash(uid: &str, resource_version: &str) -> u64 {
    // `write` feeds the bytes alone (the `Hash` impls of str would add a terminator of their own).
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(uid.as_bytes());
    hasher.write(&[0]);
    hasher.write(resource_version.as_bytes());
    let fnv = hasher.finish();
    // The finalizer of splitmix64.
    let mut z = fnv;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::object_hash;

    #[test]
    fn the_hash_is_fixed_and_tells_uid_from_version() {
        // Fixed by definition: the same in every build and on every replica.
        assert_eq!(object_hash("", ""), object_hash("", ""));
        assert_ne!(object_hash("a", "1"), object_hash("a", "2"));
        assert_ne!(object_hash("a1", ""), object_hash("a", "1"));
        let ab = object_hash("a", "1").wrapping_add(object_hash("b", "2"));
        let ba = object_hash("b", "2").wrapping_add(object_hash("a", "1"));
        assert_eq!(ab, ba, "order does not matter");
    }
}
