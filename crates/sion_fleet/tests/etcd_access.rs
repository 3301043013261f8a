//! etcd as the README runs it for a fleet ledger (docs/FLEET-LEDGER.md, "etcd: TLS and
//! authentication"): only a front-end with the operator's client certificate, signed in as the
//! ledger's user, reads or writes the ledger's state. A stranger on etcd's network — without a
//! certificate, or with the certificate but not the password, or as another user — cannot
//! write the forged log leaf of issue 30's finding 2.

use sion_fleet::FleetLedger;
use sion_fleet::local::Etcd;

const PREFIX: &str = "/sion-ledger/";

fn key(b: u8) -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[b; 32])
}

#[tokio::test]
async fn only_the_front_ends_certificate_and_user_reach_the_ledgers_state() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (etcd, secure) = Etcd::start_secure(tmp.path(), PREFIX).await.expect("a secure etcd");
    assert!(etcd.url().starts_with("https://"));
    let access = secure.access().expect("access");
    // The front-end: certificate, key, user, password.
    let ledger = FleetLedger::init_with(&[etcd.url()], PREFIX, key(1), &access).await.expect("init");
    assert_eq!(ledger.public_key(), key(1).verifying_key());
    drop(ledger);
    FleetLedger::connect_with(&[etcd.url()], PREFIX, key(1), &access).await.expect("a front-end connects");

    let forged = format!("{PREFIX}log/{:020}", 0);
    let opts = || etcd_client::ConnectOptions::new().with_timeout(std::time::Duration::from_secs(3));
    // A stranger without any certificate: no TLS handshake completes.
    let plain = async {
        let mut c = etcd_client::Client::connect([etcd.url()], Some(opts())).await?;
        c.put(forged.as_str(), vec![1u8; 8], None).await
    };
    assert!(plain.await.is_err(), "a client without TLS wrote to etcd");
    // The CA alone (TLS, but no client certificate): refused by --client-cert-auth.
    let ca_only = sion_fleet::EtcdAccess::from_files(Some(&secure.ca), None, None, None, None).expect("ca");
    assert!(
        FleetLedger::connect_with(&[etcd.url()], PREFIX, key(1), &ca_only).await.is_err(),
        "a client without a certificate reached the ledger"
    );
    // The front-end's certificate without the password: its name is no etcd user, so nothing
    // is read or written.
    let cert_only = sion_fleet::EtcdAccess::from_files(
        Some(&secure.ca),
        Some(&secure.cert),
        Some(&secure.key),
        None,
        None,
    )
    .expect("cert");
    let Err(e) = FleetLedger::connect_with(&[etcd.url()], PREFIX, key(1), &cert_only).await else {
        panic!("a stolen certificate alone read the ledger's key");
    };
    assert!(e.to_string().to_lowercase().contains("permission") || e.to_string().contains("user"), "{e}");
    // A wrong password: refused at sign-in.
    let wrong = tmp.path().join("wrong.password");
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(&wrong, "not-the-password\n").expect("write");
        std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let guessed = sion_fleet::EtcdAccess::from_files(
        Some(&secure.ca),
        Some(&secure.cert),
        Some(&secure.key),
        Some("sion-ledger"),
        Some(&wrong),
    )
    .expect("files");
    assert!(FleetLedger::connect_with(&[etcd.url()], PREFIX, key(1), &guessed).await.is_err());
    // A password file others can read is refused before it is used, naming the fix.
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let e = sion_fleet::EtcdAccess::from_files(
        Some(&secure.ca),
        Some(&secure.cert),
        Some(&secure.key),
        Some("sion-ledger"),
        Some(&wrong),
    )
    .expect_err("a password file open to others");
    assert!(e.to_string().contains("chmod 600"), "{e}");
    // The ledger's own user may touch nothing outside its prefix either.
    let options = opts()
        .with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(std::fs::read(&secure.ca).expect("ca")))
                .identity(etcd_client::Identity::from_pem(
                    std::fs::read(&secure.cert).expect("cert"),
                    std::fs::read(&secure.key).expect("key"),
                )),
        )
        .with_user(
            "sion-ledger",
            std::fs::read_to_string(&secure.password_file).expect("password").trim().to_owned(),
        );
    let mut c = etcd_client::Client::connect([etcd.url()], Some(options)).await.expect("the ledger's user");
    assert!(c.put("/elsewhere/x", "y", None).await.is_err(), "the ledger's user wrote outside its prefix");
    assert!(c.get(format!("{PREFIX}key"), None).await.is_ok(), "the ledger's user reads its prefix");
}
