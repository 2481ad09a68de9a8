//! The daemon's material through the `SecretStore` seam: a store provisioned from a CLI trust
//! root reads back as the same material, missing material names the hosted remedy, the copy
//! never overwrites, and a hosted instance identity lives in the store.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cotal_core::names::SpaceName;
use cotal_io_fs::instance::load_or_create_in;
use cotal_io_fs::secrets::SecretKey;
use cotal_io_fs::trust::{
    copy_secrets, init, load_daemon, load_daemon_from, read_issuer_keys, space_dir, Composition,
};
use cotal_io_fs::{FileSecretStore, MemorySecretStore, SecretStore, StoreIdentity};

const IDP: &str = "http://127.0.0.1:9/";

fn space() -> SpaceName {
    SpaceName::parse("main").unwrap()
}

fn injected() -> MemorySecretStore {
    MemorySecretStore::new(Some(StoreIdentity::injected("memory:test").unwrap()))
}

fn key(file: &str) -> SecretKey {
    SecretKey::of(&space(), file)
}

/// A CLI trust root made by `init`.
fn cli_root(tmp: &Path) -> PathBuf {
    let root = tmp.join("cli");
    init(&root, &space(), IDP).unwrap();
    root
}

/// A hosted state dir holding only the IdP pin, copied from `root` (0700 dirs, a 0600 file).
fn hosted_state(tmp: &Path, root: &Path) -> PathBuf {
    let state = tmp.join("hosted");
    let dir = space_dir(&state, &space());
    fs::create_dir_all(&dir).unwrap();
    for d in [state.clone(), state.join("auth"), dir.clone()] {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
    }
    let pin = dir.join("idp.json");
    fs::copy(space_dir(root, &space()).join("idp.json"), &pin).unwrap();
    fs::set_permissions(&pin, fs::Permissions::from_mode(0o600)).unwrap();
    state
}

#[test]
fn a_store_provisioned_from_a_cli_root_reads_back_as_the_same_material() {
    let tmp = tempfile::tempdir().unwrap();
    let root = cli_root(tmp.path());
    let state = hosted_state(tmp.path(), &root);
    let store = injected();
    let created = copy_secrets(&root, &space(), &store).unwrap();
    assert_eq!(
        created,
        cotal_io_fs::trust::secret_files().map(key).to_vec()
    );
    for file in cotal_io_fs::trust::secret_files() {
        assert_eq!(
            store.get(&key(file)).unwrap().unwrap(),
            fs::read(space_dir(&root, &space()).join(file)).unwrap(),
            "{file}"
        );
    }

    let cli = load_daemon(&root, &space()).unwrap();
    let hosted = load_daemon_from(&store, &state, &space(), Composition::Hosted).unwrap();
    assert_eq!(hosted, cli);
    assert_eq!(hosted.data_account(), cli.data_account());
    assert_eq!(hosted.issuer(), cli.issuer());
    assert_eq!(
        hosted.owner_for_idp_subject("alice").unwrap(),
        cli.owner_for_idp_subject("alice").unwrap()
    );
    // The file store at the CLI root is the CLI's read path, whatever the composition.
    let file_store = FileSecretStore::new(&root);
    assert_eq!(
        load_daemon_from(&file_store, &root, &space(), Composition::Hosted).unwrap(),
        cli
    );
}

#[test]
fn missing_material_is_one_refusal_with_the_hosted_remedy() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("hosted");
    let dir = space_dir(&state, &space());
    let e = load_daemon_from(&injected(), &state, &space(), Composition::Hosted).unwrap_err();
    assert_eq!(
        e,
        format!(
            "the trust root of space main is missing (service keys, callout account, issuer \
             keys, owner secret, plane system user in the secret store under \
             auth/space.6d61696e; IdP pin under {}); the hosted composition must provision the \
             secret store before starting this plane",
            dir.display()
        )
    );
    // The CLI composition keeps the sentence `up` has always printed.
    let e = load_daemon_from(&injected(), &state, &space(), Composition::Cli).unwrap_err();
    assert_eq!(
        e,
        format!(
            "the trust root of space main is missing (service keys, callout account, issuer \
             keys, owner secret, plane system user, IdP pin under {}); create it with \
             `cotal-authd init --space main --idp URL`",
            dir.display()
        )
    );

    let root = cli_root(tmp.path());
    let state = hosted_state(tmp.path(), &root);
    let store = injected();
    copy_secrets(&root, &space(), &store).unwrap();
    assert!(store.delete(&key("owner-secret.json")).unwrap());
    let e = load_daemon_from(&store, &state, &space(), Composition::Hosted).unwrap_err();
    assert_eq!(
        e,
        "the trust root of space main is missing (owner secret in the secret store under \
         auth/space.6d61696e); the hosted composition must provision the secret store before \
         starting this plane"
    );
}

#[test]
fn a_value_that_does_not_parse_is_refused_by_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let root = cli_root(tmp.path());
    let state = hosted_state(tmp.path(), &root);
    let store = injected();
    copy_secrets(&root, &space(), &store).unwrap();
    store.put(&key("issuer.json"), b"{\"ver\":1,").unwrap();
    let e = load_daemon_from(&store, &state, &space(), Composition::Hosted).unwrap_err();
    assert!(
        e.starts_with("secret auth/space.6d61696e/issuer.json is not valid JSON"),
        "{e}"
    );
}

#[test]
fn copying_is_idempotent_and_never_overwrites_other_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = cli_root(tmp.path());
    let store = injected();
    let owner = fs::read(space_dir(&root, &space()).join("owner-secret.json")).unwrap();
    store.put(&key("owner-secret.json"), &owner).unwrap();
    let created = copy_secrets(&root, &space(), &store).unwrap();
    assert_eq!(created.len(), 4);
    assert!(!created.contains(&key("owner-secret.json")));
    assert_eq!(copy_secrets(&root, &space(), &store).unwrap(), Vec::new());

    // Another root's material is refused by key, before anything is written.
    let other = tmp.path().join("other");
    init(&other, &space(), IDP).unwrap();
    let fresh = injected();
    fresh.put(&key("issuer.json"), b"held").unwrap();
    let e = copy_secrets(&other, &space(), &store).unwrap_err();
    assert_eq!(
        e,
        "secret auth/space.6d61696e/service-keys.json holds other bytes than the trust root's \
         copy; a secret is never overwritten (delete it from the store first if the trust \
         root's copy is the one to keep)"
    );
    assert!(copy_secrets(&other, &space(), &fresh)
        .unwrap_err()
        .starts_with("secret auth/space.6d61696e/issuer.json holds other bytes"));
    assert_eq!(fresh.get(&key("issuer.json")).unwrap().unwrap(), b"held");
    assert_eq!(fresh.get(&key("service-keys.json")).unwrap(), None);

    // A root that is not a complete trust root is refused with the CLI's sentence.
    let empty = tmp.path().join("empty");
    let e = copy_secrets(&empty, &space(), &injected()).unwrap_err();
    assert!(
        e.starts_with("the trust root of space main is missing ("),
        "{e}"
    );
}

#[test]
fn a_file_store_provisioned_by_copy_lands_on_the_cli_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let root = cli_root(tmp.path());
    let target = tmp.path().join("target");
    let store = FileSecretStore::new(&target);
    assert_eq!(copy_secrets(&root, &space(), &store).unwrap().len(), 5);
    for file in cotal_io_fs::trust::secret_files() {
        let path = space_dir(&target, &space()).join(file);
        assert_eq!(
            fs::read(&path).unwrap(),
            fs::read(space_dir(&root, &space()).join(file)).unwrap()
        );
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
}

#[test]
fn a_hosted_instance_identity_is_created_once_in_the_store() {
    let store = injected();
    let first = load_or_create_in(&store, &space()).unwrap();
    let again = load_or_create_in(&store, &space()).unwrap();
    assert_eq!(first.instance, again.instance);
    assert_eq!(first.serve_key, again.serve_key);
    assert!(first.serve_key.starts_with('U'));
    let bytes = store.get(&key("instance.json")).unwrap().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["ver"], 1);
    assert_eq!(doc["instanceId"], first.instance.as_str());
    assert_eq!(doc["serveIdentity"]["id"], first.serve_key.as_str());

    // Concurrent first calls converge on the one that created it.
    let racing = injected();
    let seen: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let id = load_or_create_in(&racing, &space()).unwrap();
                    (id.instance.as_str().to_owned(), id.serve_key)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");

    store.put(&key("instance.json"), b"{}").unwrap();
    let e = load_or_create_in(&store, &space()).unwrap_err();
    assert!(
        e.starts_with(
            "secret auth/space.6d61696e/instance.json is not a valid auth instance identity"
        ),
        "{e}"
    );
}

/// A running plane re-reads its issuer keys alone: what the store holds, or why not.
#[test]
fn the_issuer_keys_read_alone_from_a_store_or_say_why_not() {
    let tmp = tempfile::tempdir().unwrap();
    let root = cli_root(tmp.path());
    let store = injected();
    assert_eq!(
        read_issuer_keys(&store, &space()).unwrap_err(),
        "it is missing"
    );
    copy_secrets(&root, &space(), &store).unwrap();
    let cli = load_daemon(&root, &space()).unwrap();
    assert_eq!(&read_issuer_keys(&store, &space()).unwrap(), cli.issuer());
    store.put(&key("issuer.json"), b"{}").unwrap();
    assert!(read_issuer_keys(&store, &space()).is_err());
}
