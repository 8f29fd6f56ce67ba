//! Continue-as-new through the library, when a generation cannot end: the
//! next generation, created already, is left to be driven, never held by
//! a host that drives nothing of it.

mod answered;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use stepstone::component::CodeCache;
use stepstone::config::HostConfig;
use stepstone::runtime::{RunState, Runtime, Submission};
use stepstone::store::seams::{Before, Call, Seams};
use stepstone::store::{RunId, SignalName, Storage, TenantId};
use stepstone_e2e::guest;

use answered::AnsweredAtOnce;

/// A generation that started the next and then could not store its own
/// outcome (its host lost its lease, or the store refused) leaves the next
/// generation to whichever host is woken for it: its creator, woken by a
/// signal sent through another host, drives it to its end (found by the
/// simulation, seed 10 with stalls at the seams: the creator kept its
/// claim on the next generation, driving nothing, and the host that took
/// the chain over deferred to it, alive).
#[tokio::test]
async fn a_generation_that_cannot_end_leaves_the_next_to_the_host_woken_for_it() {
    let refuse_the_first_outcome: Before = Arc::new(|call, key| {
        async move {
            match call == Call::Put && key.as_ref().ends_with("/runs/relay/outcome") {
                true => Err(object_store::Error::AlreadyExists {
                    path: key.to_string(),
                    source: "a test refuses the first generation's outcome".into(),
                }),
                false => Ok(()),
            }
        }
        .boxed()
    });
    let storage = Storage::new(Arc::new(Seams::before(refuse_the_first_outcome)));
    let attempts = Arc::new(AnsweredAtOnce::default());
    let creator = Runtime::with_step_stand_in(HostConfig::new(), storage.clone(), CodeCache::disabled(), attempts)
        .expect("a runtime");
    let tenant = TenantId::default_tenant();
    let bytes = bytes::Bytes::from(std::fs::read(guest("bench")).expect("the guest is built"));
    let bench = creator.upload(&tenant, bytes, None).await.expect("uploaded");
    let mut relay = Submission::new(bench, "relay", r#"{"n":1,"nap_s":0}"#);
    let first = RunId::new("relay").expect("a valid id");
    relay.run_id = Some(first.clone());
    creator.submit(&tenant, relay).await.expect("submitted");
    let ended = creator.run_to_end(&tenant, &first, None).await;
    assert!(ended.is_err(), "the first generation's outcome was refused: {ended:?}");

    let next = RunId::new("relay.g1").expect("a valid id");
    let other = Runtime::new(HostConfig::new(), storage, CodeCache::disabled()).expect("a runtime");
    let go = SignalName::new("go").expect("a valid name");
    other.signal(&tenant, &next, &go, "null").await.expect("sent");
    let status = creator
        .runs()
        .wait(&tenant, &next, Duration::from_secs(30))
        .await
        .expect("waited");
    assert!(
        matches!(&status.state, RunState::Completed { .. }),
        "the next generation was never driven: {:?}",
        status.state
    );
}
