//! Vendor clients reused per connection while what they were built from is unchanged.
//!
//! Building a client costs a secret's decryption, a TLS configuration and a fresh connection
//! pool; a webhook's follow-up read needs one per delivery. [`ClientCache`] keeps the client a
//! connection last built, beside the inputs it was built from (its `K`: the connection's status
//! and settings, the instance's address, the secret as sealed in the database). A caller reads
//! those inputs (one cheap query) and gets the cached client only when they are equal, so a
//! rotated token, a moved instance or changed settings build a new client on the next read:
//! invalidation is exact, never by time.

use std::collections::HashMap;
use std::sync::Mutex;

use uuid::Uuid;

/// Clients by connection, each with the inputs it was built from.
pub struct ClientCache<K, C> {
    built: Mutex<HashMap<Uuid, (K, C)>>,
}

impl<K, C> Default for ClientCache<K, C> {
    fn default() -> Self {
        Self {
            built: Mutex::new(HashMap::new()),
        }
    }
}

impl<K, C> std::fmt::Debug for ClientCache<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither inputs (a sealed secret) nor clients (a token) reach logs.
        let cached = self.built.lock().map(|b| b.len()).unwrap_or_default();
        f.debug_struct("ClientCache")
            .field("cached", &cached)
            .finish()
    }
}

impl<K: PartialEq, C: Clone> ClientCache<K, C> {
    /// `connection`'s client built from `inputs`: the cached one when it was built from equal
    /// inputs, else `build`'s, which replaces it (a failed build leaves nothing cached for the
    /// connection).
    pub fn get_or_build<E>(
        &self,
        connection: Uuid,
        inputs: K,
        build: impl FnOnce(&K) -> Result<C, E>,
    ) -> Result<C, E> {
        if let Some((built_from, client)) = self.lock().get(&connection)
            && *built_from == inputs
        {
            return Ok(client.clone());
        }
        // Built outside the lock: two first reads may both build; the later one is kept.
        match build(&inputs) {
            Ok(client) => {
                self.lock().insert(connection, (inputs, client.clone()));
                Ok(client)
            }
            Err(e) => {
                self.forget(connection);
                Err(e)
            }
        }
    }

    /// Drops `connection`'s client (it may read no more: its credential leaves memory too).
    pub fn forget(&self, connection: Uuid) {
        self.lock().remove(&connection);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, (K, C)>> {
        // A panic while holding the map leaves it whole: recover it.
        self.built.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn equal_inputs_reuse_the_client_and_changed_inputs_build_anew() {
        let cache: ClientCache<&str, u32> = ClientCache::default();
        let builds = Cell::new(0);
        let build = |n| {
            builds.set(builds.get() + 1);
            Ok::<_, ()>(n)
        };
        let conn = Uuid::now_v7();
        assert_eq!(cache.get_or_build(conn, "token-a", |_| build(1)), Ok(1));
        assert_eq!(cache.get_or_build(conn, "token-a", |_| build(2)), Ok(1));
        assert_eq!(builds.get(), 1, "equal inputs build nothing");
        // A rotated secret is a new client at once.
        assert_eq!(cache.get_or_build(conn, "token-b", |_| build(3)), Ok(3));
        assert_eq!(cache.get_or_build(conn, "token-b", |_| build(4)), Ok(3));
        // Another connection never gets this one's client, even with equal inputs.
        let other = Uuid::now_v7();
        assert_eq!(cache.get_or_build(other, "token-b", |_| build(5)), Ok(5));
        assert_eq!(builds.get(), 3);
    }

    #[test]
    fn a_failed_build_or_a_forgotten_connection_leaves_nothing_cached() {
        let cache: ClientCache<&str, u32> = ClientCache::default();
        let conn = Uuid::now_v7();
        assert_eq!(cache.get_or_build(conn, "a", |_| Ok::<_, ()>(1)), Ok(1));
        assert_eq!(
            cache.get_or_build(conn, "b", |_| Err::<u32, _>("bad")),
            Err("bad")
        );
        // The old client is gone with the failed rebuild: "a" builds again.
        assert_eq!(cache.get_or_build(conn, "a", |_| Ok::<_, ()>(2)), Ok(2));
        cache.forget(conn);
        assert_eq!(cache.get_or_build(conn, "a", |_| Ok::<_, ()>(3)), Ok(3));
    }
}
