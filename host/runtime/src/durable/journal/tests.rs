//! The journal's places: holes, writes, matches and where a replay stops.

use waft_core::model::JournalWrite;

use super::*;
use crate::durable::digest;
use crate::durable::writes::hole;
use crate::{LeaseLost, RecordingHost};

pub(in crate::durable) const HTTP: &str = "wasi:http/outgoing-handler.handle";
pub(in crate::durable) const CLOCK: &str = "wasi:clocks/wall-clock.now";

pub(in crate::durable) fn journal(recorded: Vec<JournalEntry>) -> (Journal, Arc<RecordingHost>) {
    let host = Arc::new(RecordingHost::default());
    let journal = Journal::new(host.clone(), 2, recorded, Arc::default());
    (journal, host)
}

/// Makes `call` live (it must be) and records `outside` for it.
pub(in crate::durable) fn live(journal: &Journal, call: &'static str, n: u8, outside: Outside) {
    let d = digest(call, &n);
    let Step::Live(ticket) = journal.call(call, &d).unwrap() else {
        panic!("{call} should run live");
    };
    journal
        .record(ticket, &d, vec![n], format!("{n}"), outside)
        .unwrap();
}

pub(in crate::durable) fn entries(write: &JournalWrite) -> Vec<(u32, bool)> {
    write.entries.iter().map(|e| (e.seq, is_hole(e))).collect()
}

#[tokio::test]
async fn a_call_in_flight_is_written_as_a_hole_and_written_again_once_answered() {
    let (journal, host) = journal(Vec::new());
    live(&journal, CLOCK, 0, Outside::No);
    let in_flight = journal.reserve(HTTP).unwrap();
    let d = digest(HTTP, &1u8);
    let Step::Live(first) = in_flight.resolve(&d).unwrap() else {
        panic!()
    };
    live(&journal, HTTP, 2, Outside::Answered);
    journal.commit().await.unwrap();
    journal
        .record(first, &d, vec![1], "1".into(), Outside::Answered)
        .unwrap();
    journal.commit().await.unwrap();
    let writes = host.journal_writes();
    assert_eq!(entries(&writes[0]), [(0, false), (1, true), (2, false)]);
    // The hole kept its place: the next write starts there.
    assert_eq!(writes[1].from, 1);
    assert_eq!(entries(&writes[1]), [(1, false), (2, false)]);
}

#[tokio::test]
async fn a_call_given_up_stays_a_hole_and_later_writes_go_past_it() {
    let (journal, host) = journal(Vec::new());
    drop(journal.reserve(HTTP).unwrap());
    live(&journal, HTTP, 1, Outside::Answered);
    journal.commit().await.unwrap();
    live(&journal, HTTP, 2, Outside::Answered);
    journal.commit().await.unwrap();
    let writes = host.journal_writes();
    assert_eq!(entries(&writes[0]), [(0, true), (1, false)]);
    assert_eq!(writes[1].from, 2, "nothing waits on a call given up");
}

/// A platform whose journal writes wait for a permit each.
struct GatedHost {
    gate: tokio::sync::Semaphore,
    writes: Mutex<Vec<JournalWrite>>,
}

#[async_trait::async_trait]
impl TaskHost for GatedHost {
    async fn heartbeat(&self, _: Option<String>) -> Result<(), LeaseLost> {
        Ok(())
    }
    async fn schedule(&self, _: crate::ChildRequest) -> Result<String, crate::ScheduleRejection> {
        Ok("child".into())
    }
    async fn journal(&self, write: JournalWrite) -> Result<(), LeaseLost> {
        self.writes.lock().unwrap().push(write);
        self.gate.acquire().await.unwrap().forget();
        Ok(())
    }
    async fn signal(&self, _: &str, _: u32) -> Result<Option<Vec<u8>>, crate::Unread> {
        Ok(None)
    }
    async fn children(
        &self,
        _: &[String],
    ) -> Result<waft_core::model::ChildrenState, crate::Unread> {
        Ok(waft_core::model::ChildrenState::Waiting { live: 1 })
    }
}

#[tokio::test]
async fn a_hole_of_the_journal_reached_while_a_write_runs_is_written_once_answered() {
    let (first, _) = journal(Vec::new());
    live(&first, CLOCK, 0, Outside::No);
    let clock = first.finish(false).entries.remove(0);
    let recorded = vec![clock.clone(), hole(1, HTTP), hole(2, HTTP)];
    let host = Arc::new(GatedHost {
        gate: tokio::sync::Semaphore::new(0),
        writes: Mutex::default(),
    });
    let journal = Journal::new(host.clone(), 2, recorded, Arc::default());
    assert!(matches!(
        journal.call(CLOCK, &digest(CLOCK, &0u8)).unwrap(),
        Step::Replay { .. }
    ));
    live(&journal, HTTP, 1, Outside::Answered);
    // A write of hole 1's answer begins; hole 2 is reached meanwhile.
    let writing = journal.commit();
    tokio::pin!(writing);
    assert!(futures_poll(&mut writing).is_none());
    let d = digest(HTTP, &2u8);
    let Step::Live(ticket) = journal.reserve(HTTP).unwrap().resolve(&d).unwrap() else {
        panic!("a hole runs live")
    };
    host.gate.add_permits(1);
    writing.await.unwrap();
    journal
        .record(ticket, &d, vec![2], "2".into(), Outside::Answered)
        .unwrap();
    host.gate.add_permits(1);
    journal.commit().await.unwrap();
    let last = host.writes.lock().unwrap().pop().unwrap();
    assert_eq!(last.from, 2);
    assert_eq!(entries(&last), [(2, false)]);
}

#[tokio::test]
async fn an_outside_call_waits_for_every_call_before_it_to_be_matched() {
    let (first, _) = journal(Vec::new());
    live(&first, HTTP, 0, Outside::Answered);
    let (journal, _) = journal(first.finish(false).entries);
    let earlier = journal.reserve(HTTP).unwrap();
    let later = journal.reserve(HTTP).unwrap();
    let Step::Live(ticket) = later.resolve(&digest(HTTP, &1u8)).unwrap() else {
        panic!("past the end: live")
    };
    let waiting = journal.settled(ticket.seq());
    tokio::pin!(waiting);
    assert!(
        futures_poll(&mut waiting).is_none(),
        "the earlier call is not matched yet"
    );
    // It mismatches: the later call must not go out.
    assert!(earlier.resolve(&digest(HTTP, &9u8)).is_err());
    assert!(matches!(waiting.await, Err(Halt::Diverged(_))));
}
#[tokio::test]
async fn a_call_past_the_recorded_journal_waits_for_no_live_call() {
    let (journal, _) = journal(Vec::new());
    let writing = journal.reserve(HTTP).unwrap();
    let Step::Live(later) = journal.call(HTTP, &digest(HTTP, &1u8)).unwrap() else {
        panic!("live")
    };
    let mut waiting = Box::pin(journal.settled(later.seq()));
    assert!(
        futures_poll(&mut waiting).is_some(),
        "a live place cannot mismatch: nothing to wait for"
    );
    drop(writing);
}

#[test]
fn a_journal_stopping_at_its_end_stops_at_the_first_call_it_does_not_answer() {
    let (first, _) = journal(Vec::new());
    live(&first, CLOCK, 0, Outside::No);
    let (again, _) = journal(first.finish(false).entries);
    again.stop_at_end();
    assert!(matches!(
        again.call(CLOCK, &digest(CLOCK, &0u8)),
        Ok(Step::Replay { seq: 0, .. })
    ));
    let ended = Halt::Ended {
        seq: 1,
        call: HTTP.to_owned(),
    };
    assert_eq!(
        again.call(HTTP, &digest(HTTP, &1u8)).err(),
        Some(ended.clone())
    );
    assert_eq!(again.halt(), Some(ended));
    assert_eq!(again.replayed(), 1);
}

/// Polls a future once.
pub(in crate::durable) fn futures_poll<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    match std::pin::Pin::new(future).poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}
