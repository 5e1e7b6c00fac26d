//! Connection secrets at rest: AES-256-GCM under a key from the environment, bound to the row
//! (connection id and secret name are the associated data, so a ciphertext cannot be moved to
//! another row). Plaintext never leaves this module except to the caller that asked for it.
//!
//! The environment holds a [`Keyring`]: the newest key seals, any listed key opens the secrets
//! sealed under its id, and [`reseal`] moves every secret to the newest key so an old one can be
//! dropped.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use sea_orm::{
    ActiveValue::Set, ConnectionTrait, DbBackend, DbErr, EntityTrait, Statement, TransactionTrait,
    sea_query::OnConflict,
};
use uuid::Uuid;

use crate::entity::connection_secret;

/// Why a secret could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("FORGESYNC_SECRET_KEY must be 32 bytes encoded as base64 ({0})")]
    BadKey(String),
    #[error(
        "FORGESYNC_SECRET_KEY must be one base64 key or `id:base64,id:base64,...` with distinct \
         ids of letters, digits, `-` or `_` (the last key seals) ({0})"
    )]
    BadRing(String),
    #[error("secret {name:?} was sealed under key {key_id:?}, which is not configured")]
    UnknownKey { name: String, key_id: String },
    #[error("secret {0:?} failed authentication: wrong key or tampered ciphertext")]
    Tampered(String),
    #[error("no random bytes available for a nonce: {0}")]
    Random(String),
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// The sealing key. Debug output never shows key material.
#[derive(Clone)]
pub struct SecretKey {
    id: String,
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SecretKey {
    /// Parses a base64 32-byte key. The key id is the operator's label for it in the ring,
    /// stored beside each ciphertext.
    pub fn from_base64(id: impl Into<String>, encoded: &str) -> Result<Self, SecretError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| SecretError::BadKey(e.to_string()))?;
        let cipher = Aes256Gcm::new_from_slice(&bytes)
            .map_err(|_| SecretError::BadKey(format!("got {} bytes", bytes.len())))?;
        Ok(SecretKey {
            id: id.into(),
            cipher,
        })
    }

    /// The label stored with each ciphertext.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn aad(connection_id: Uuid, name: &str) -> Vec<u8> {
        let mut aad = connection_id.as_bytes().to_vec();
        aad.extend_from_slice(name.as_bytes());
        aad
    }

    /// Encrypts `plaintext` for `(connection_id, name)`; returns (nonce, ciphertext).
    pub fn seal(
        &self,
        connection_id: Uuid,
        name: &str,
        plaintext: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), SecretError> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).map_err(|e| SecretError::Random(e.to_string()))?;
        let aad = Self::aad(connection_id, name);
        let ciphertext = self
            .cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .map_err(|_| SecretError::Tampered(name.to_owned()))?;
        Ok((nonce.to_vec(), ciphertext))
    }

    /// Decrypts a ciphertext sealed by [`SecretKey::seal`] for the same row.
    pub fn open(
        &self,
        connection_id: Uuid,
        name: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<Vec<u8>, SecretError> {
        let nonce: [u8; 12] = nonce
            .try_into()
            .map_err(|_| SecretError::Tampered(name.to_owned()))?;
        let aad = Self::aad(connection_id, name);
        self.cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| SecretError::Tampered(name.to_owned()))
    }
}

/// The id of a key given alone (a bare base64 value): the id every secret sealed before key
/// rotation carries, so those rows keep opening.
pub const LEGACY_KEY_ID: &str = "k1";

/// The keys of `FORGESYNC_SECRET_KEY`: the newest seals, every one opens what was sealed under
/// its id. Debug output shows only the ids.
#[derive(Clone, Debug)]
pub struct Keyring {
    /// Oldest first; the last one seals.
    keys: Vec<SecretKey>,
}

impl Keyring {
    /// Parses `id:base64,id:base64,...` (the last key is the newest and seals) or a bare base64
    /// key, which is a one-key ring under [`LEGACY_KEY_ID`].
    pub fn parse(spec: &str) -> Result<Self, SecretError> {
        let spec = spec.trim();
        // Base64 has no `:`, so a bare key is told apart from a ring by it.
        if !spec.contains(':') {
            return Ok(Keyring {
                keys: vec![SecretKey::from_base64(LEGACY_KEY_ID, spec)?],
            });
        }
        let mut keys: Vec<SecretKey> = Vec::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((id, encoded)) = entry.split_once(':') else {
                return Err(SecretError::BadRing("an entry has no `id:`".into()));
            };
            let id = id.trim();
            let valid_id = !id.is_empty()
                && id.len() <= 32
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid_id {
                return Err(SecretError::BadRing(format!("bad key id {id:?}")));
            }
            if keys.iter().any(|k| k.id == id) {
                return Err(SecretError::BadRing(format!(
                    "key id {id:?} is listed twice"
                )));
            }
            keys.push(SecretKey::from_base64(id, encoded)?);
        }
        if keys.is_empty() {
            return Err(SecretError::BadRing("no keys".into()));
        }
        Ok(Keyring { keys })
    }

    /// The key new secrets are sealed under.
    pub fn sealing(&self) -> &SecretKey {
        self.keys.last().expect("a keyring has at least one key")
    }

    /// The key of `id`, if the ring has it.
    pub fn key(&self, id: &str) -> Option<&SecretKey> {
        self.keys.iter().find(|k| k.id == id)
    }

    /// Ids of every key, oldest first.
    pub fn ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.id.clone()).collect()
    }

    /// Decrypts a secret sealed under `key_id` for `(connection_id, name)`.
    pub fn open(
        &self,
        key_id: &str,
        connection_id: Uuid,
        name: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<Vec<u8>, SecretError> {
        // The key id stored with the secret picks the key: any key of the ring opens.
        let key = self.key(key_id).ok_or_else(|| SecretError::UnknownKey {
            name: name.to_owned(),
            key_id: key_id.to_owned(),
        })?;
        key.open(connection_id, name, nonce, ciphertext)
    }
}

/// Stores (or replaces) one secret of a connection.
pub async fn put<C: ConnectionTrait>(
    db: &C,
    ring: &Keyring,
    connection_id: Uuid,
    name: &str,
    plaintext: &[u8],
) -> Result<(), SecretError> {
    let key = ring.sealing();
    let (nonce, ciphertext) = key.seal(connection_id, name, plaintext)?;
    connection_secret::Entity::insert(connection_secret::ActiveModel {
        connection_id: Set(connection_id),
        name: Set(name.to_owned()),
        key_id: Set(key.id().to_owned()),
        nonce: Set(nonce),
        ciphertext: Set(ciphertext),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::columns([
            connection_secret::Column::ConnectionId,
            connection_secret::Column::Name,
        ])
        .update_columns([
            connection_secret::Column::KeyId,
            connection_secret::Column::Nonce,
            connection_secret::Column::Ciphertext,
        ])
        .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    Ok(())
}

/// Reads and decrypts one secret; `None` when the connection has no secret of that name.
pub async fn get<C: ConnectionTrait>(
    db: &C,
    ring: &Keyring,
    connection_id: Uuid,
    name: &str,
) -> Result<Option<Vec<u8>>, SecretError> {
    let Some(row) = connection_secret::Entity::find_by_id((connection_id, name.to_owned()))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    ring.open(
        &row.key_id,
        connection_id,
        name,
        &row.nonce,
        &row.ciphertext,
    )
    .map(Some)
}

/// What one [`reseal`] run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResealReport {
    /// Secrets moved to the newest key by this run.
    pub resealed: u64,
    /// Secrets this run could not open (a key id not in the ring, or a failed authentication),
    /// each as `connection_id/name: reason`; they stay as they were.
    pub failed: Vec<String>,
    /// Secrets not under the newest key once the run ended (the failed ones, and any a service
    /// still on an older ring wrote meanwhile). Drop an old key only when this is zero.
    pub remaining: u64,
}

/// Re-seals every secret not under the ring's newest key (the connections' secrets, then the
/// removal credentials of provider repair references), `batch` rows per transaction. Each
/// row is locked while it is rewritten, so a concurrent [`put`] either waits or wins (and its row
/// is then skipped if already under the newest key); running it again changes nothing more.
pub async fn reseal(
    db: &sea_orm::DatabaseConnection,
    ring: &Keyring,
    batch: u32,
) -> Result<ResealReport, SecretError> {
    let newest = ring.sealing();
    let batch = batch.max(1);
    let mut report = ResealReport::default();
    // Keyset cursor: every row is visited once per run, even one that cannot be opened.
    let mut after: Option<(Uuid, String)> = None;
    loop {
        let txn = db.begin().await?;
        let (cursor, mut values): (&str, Vec<sea_orm::Value>) = match &after {
            Some((c, n)) => (
                "AND (connection_id, name) > ($2, $3)",
                vec![(*c).into(), n.clone().into()],
            ),
            None => ("", vec![]),
        };
        values.insert(0, newest.id().into());
        // Rotation: row locks, so a rewrite never races a concurrent put of the same secret.
        let rows = txn
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT connection_id, name, key_id, nonce, ciphertext FROM connection_secret \
                     WHERE key_id <> $1 {cursor} ORDER BY connection_id, name LIMIT {batch} \
                     FOR UPDATE"
                ),
                values,
            ))
            .await?;
        if rows.is_empty() {
            txn.commit().await?;
            break;
        }
        for row in &rows {
            let connection_id: Uuid = row.try_get("", "connection_id")?;
            let name: String = row.try_get("", "name")?;
            let key_id: String = row.try_get("", "key_id")?;
            let nonce: Vec<u8> = row.try_get("", "nonce")?;
            let ciphertext: Vec<u8> = row.try_get("", "ciphertext")?;
            match ring.open(&key_id, connection_id, &name, &nonce, &ciphertext) {
                Ok(plaintext) => {
                    let (nonce, ciphertext) = newest.seal(connection_id, &name, &plaintext)?;
                    txn.execute_raw(Statement::from_sql_and_values(
                        DbBackend::Postgres,
                        "UPDATE connection_secret SET key_id = $3, nonce = $4, ciphertext = $5 \
                         WHERE connection_id = $1 AND name = $2",
                        [
                            connection_id.into(),
                            name.clone().into(),
                            newest.id().into(),
                            nonce.into(),
                            ciphertext.into(),
                        ],
                    ))
                    .await?;
                    report.resealed += 1;
                }
                Err(e) => report.failed.push(format!("{connection_id}/{name}: {e}")),
            }
            after = Some((connection_id, name));
        }
        txn.commit().await?;
    }
    reseal_repair_credentials(db, ring, batch, &mut report).await?;
    let left = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT (SELECT count(*) FROM connection_secret WHERE key_id <> $1)
                  + (SELECT count(*) FROM connection_provider_repair
                      WHERE credential_key_id <> $1) AS n",
            [newest.id().into()],
        ))
        .await?
        .map(|r| r.try_get::<i64>("", "n"))
        .transpose()?
        .unwrap_or(0);
    report.remaining = u64::try_from(left).unwrap_or(0);
    Ok(report)
}

/// [`reseal`] of the removal credentials sealed into provider repair references (as the
/// connection's secret they were, so under the same row binding).
async fn reseal_repair_credentials(
    db: &sea_orm::DatabaseConnection,
    ring: &Keyring,
    batch: u32,
    report: &mut ResealReport,
) -> Result<(), SecretError> {
    let newest = ring.sealing();
    let mut after: Option<Uuid> = None;
    loop {
        let txn = db.begin().await?;
        let (cursor, mut values): (&str, Vec<sea_orm::Value>) = match after {
            Some(id) => ("AND id > $2", vec![id.into()]),
            None => ("", vec![]),
        };
        values.insert(0, newest.id().into());
        let rows = txn
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT id, connection_id, credential_name, credential_key_id, \
                     credential_nonce, credential_ciphertext FROM connection_provider_repair \
                     WHERE credential_key_id <> $1 {cursor} ORDER BY id LIMIT {batch} FOR UPDATE"
                ),
                values,
            ))
            .await?;
        if rows.is_empty() {
            txn.commit().await?;
            return Ok(());
        }
        for row in &rows {
            let id: Uuid = row.try_get("", "id")?;
            let connection_id: Uuid = row.try_get("", "connection_id")?;
            let name: String = row.try_get("", "credential_name")?;
            let key_id: String = row.try_get("", "credential_key_id")?;
            let nonce: Vec<u8> = row.try_get("", "credential_nonce")?;
            let ciphertext: Vec<u8> = row.try_get("", "credential_ciphertext")?;
            match ring.open(&key_id, connection_id, &name, &nonce, &ciphertext) {
                Ok(plaintext) => {
                    let (nonce, ciphertext) = newest.seal(connection_id, &name, &plaintext)?;
                    txn.execute_raw(Statement::from_sql_and_values(
                        DbBackend::Postgres,
                        "UPDATE connection_provider_repair SET credential_key_id = $2, \
                         credential_nonce = $3, credential_ciphertext = $4, updated_at = now() \
                         WHERE id = $1",
                        [
                            id.into(),
                            newest.id().into(),
                            nonce.into(),
                            ciphertext.into(),
                        ],
                    ))
                    .await?;
                    report.resealed += 1;
                }
                Err(e) => report
                    .failed
                    .push(format!("{connection_id}/repair reference {id}: {e}")),
            }
            after = Some(id);
        }
        txn.commit().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SecretKey {
        SecretKey::from_base64(
            "k1",
            &base64::engine::general_purpose::STANDARD.encode([7u8; 32]),
        )
        .unwrap()
    }

    #[test]
    fn sealed_secret_opens_only_for_its_row() {
        let k = key();
        let conn = Uuid::now_v7();
        let (nonce, ct) = k.seal(conn, "token", b"ghp_secret").unwrap();
        assert!(!ct.windows(10).any(|w| w == b"ghp_secret"));
        assert_eq!(k.open(conn, "token", &nonce, &ct).unwrap(), b"ghp_secret");
        assert!(matches!(
            k.open(conn, "other", &nonce, &ct),
            Err(SecretError::Tampered(_))
        ));
        assert!(matches!(
            k.open(Uuid::now_v7(), "token", &nonce, &ct),
            Err(SecretError::Tampered(_))
        ));
    }

    fn b64(byte: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode([byte; 32])
    }

    #[test]
    fn a_bare_key_is_a_one_key_ring_under_the_legacy_id() {
        let ring = Keyring::parse(&b64(7)).unwrap();
        assert_eq!(ring.ids(), vec![LEGACY_KEY_ID.to_owned()]);
        let conn = Uuid::now_v7();
        // A row sealed before rings existed (id `k1`) still opens.
        let (nonce, ct) = key().seal(conn, "token", b"old").unwrap();
        assert_eq!(
            ring.open(LEGACY_KEY_ID, conn, "token", &nonce, &ct)
                .unwrap(),
            b"old"
        );
    }

    #[test]
    fn the_last_key_seals_and_every_key_opens_by_its_id() {
        let ring = Keyring::parse(&format!("k1:{}, k2:{}", b64(7), b64(9))).unwrap();
        assert_eq!(ring.sealing().id(), "k2");
        let conn = Uuid::now_v7();
        let (n1, c1) = key().seal(conn, "a", b"one").unwrap();
        let (n2, c2) = ring.sealing().seal(conn, "b", b"two").unwrap();
        assert_eq!(ring.open("k1", conn, "a", &n1, &c1).unwrap(), b"one");
        assert_eq!(ring.open("k2", conn, "b", &n2, &c2).unwrap(), b"two");
        // The id picks the key: the wrong id fails, an unknown id is named.
        assert!(matches!(
            ring.open("k2", conn, "a", &n1, &c1),
            Err(SecretError::Tampered(_))
        ));
        let only_new = Keyring::parse(&format!("k2:{}", b64(9))).unwrap();
        assert!(matches!(
            only_new.open("k1", conn, "a", &n1, &c1),
            Err(SecretError::UnknownKey { .. })
        ));
    }

    #[test]
    fn bad_rings_are_refused_naming_the_setting() {
        for bad in [
            format!("k1:{},k1:{}", b64(1), b64(2)),
            format!("k 1:{}", b64(1)),
            format!(":{}", b64(1)),
            format!("k1:{},k2", b64(1)),
            "k1:c2hvcnQ=".to_owned(),
            ",".to_owned(),
        ] {
            let err = Keyring::parse(&bad).unwrap_err();
            assert!(
                err.to_string().contains("FORGESYNC_SECRET_KEY"),
                "{bad}: {err}"
            );
        }
        assert!(!format!("{:?}", Keyring::parse(&b64(7)).unwrap()).contains(&b64(7)));
    }

    #[test]
    fn bad_keys_are_named() {
        let err = SecretKey::from_base64("k1", "c2hvcnQ=").unwrap_err();
        assert!(err.to_string().contains("FORGESYNC_SECRET_KEY"));
        assert!(!format!("{:?}", key()).contains("7"));
    }
}
