//! Confirmations of held reads, asked of the registry together.
//!
//! A gateway that holds a read's result under a name sends every later read of it here with
//! that name: the request is checked as any other, then the registry is asked whether the
//! contents still have the name (`ReadResourceRequest.if_tag`). Under load many such reads of
//! one resource arrive together (the gateway sends its calls in batches), each with the same
//! question, and the registry's answer to the same question at the same moment is the same.
//! So identical questions share one: at most one is in flight, and those that arrive while it
//! is share the next. Each read still gets the answer to a question asked after it arrived, so
//! none is answered from an older look at the contents than it would be alone.
//!
//! Questions are identical when their messages are, byte for byte (the resource, the held
//! name, the caller and its scopes, the client's capabilities): the key is the encoded message.
//! The shared question carries the trace of the read that asked it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mcp_proto::registry::{ReadResourceRequest, ReadResourceResult};
use prost::Message as _;

/// The registry's answer to a question.
pub type Answer = Result<ReadResourceResult, tonic::Status>;

/// The questions in flight or about to be, by their encoded message.
#[derive(Default)]
pub struct Confirmations {
    lines: Mutex<HashMap<Box<[u8]>, Arc<Line>>>,
}

/// The questions asked with one message, one at a time.
#[derive(Default)]
struct Line {
    /// How many have begun.
    begun: AtomicU64,
    /// The last answer, with the number of the question it answered (from 0).
    last: tokio::sync::Mutex<Option<(u64, Answer)>>,
}

impl Confirmations {
    /// The registry's answer to `question`: from a question asked after this call began,
    /// `ask`ed here or by another call with the same question.
    pub async fn ask<F, Fut>(&self, question: ReadResourceRequest, ask: F) -> Answer
    where
        F: FnOnce(ReadResourceRequest) -> Fut,
        Fut: Future<Output = Answer>,
    {
        let key: Box<[u8]> = question.encode_to_vec().into();
        let line = {
            let mut lines = self.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match lines.get(&key) {
                Some(line) => line.clone(),
                None => lines.entry(key.clone()).or_default().clone(),
            }
        };
        // The line is held through `held` alone, so that its count is this call's and the map's.
        let held = Leave { confirmations: self, key, line: Some(line) };
        let Some(line) = &held.line else { unreachable!("held until dropped") };
        // Every question from this number on began after this call did.
        let arrived = line.begun.load(Ordering::SeqCst);
        let mut last = line.last.lock().await;
        if let Some((number, answer)) = &*last
            && *number >= arrived
        {
            return answer.clone();
        }
        let number = line.begun.fetch_add(1, Ordering::SeqCst);
        let answer = ask(question).await;
        *last = Some((number, answer.clone()));
        answer
    }

    /// How many lines are kept: messages with a question in flight or a call waiting (for tests).
    pub fn lines(&self) -> usize {
        self.lines.lock().map(|l| l.len()).unwrap_or_default()
    }
}

/// Forgets a line once no call holds it any more (also when a call is dropped midway).
struct Leave<'a> {
    confirmations: &'a Confirmations,
    key: Box<[u8]>,
    /// `Some` until dropped, under the map's lock.
    line: Option<Arc<Line>>,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut lines = self.confirmations.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Every holder takes its count and gives it back under the map's lock: when the map's and
        // this one's are the last, no other call holds the line.
        if let Some(line) = self.line.take()
            && Arc::strong_count(&line) == 2
        {
            lines.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn question(uri: &str, tag: &str) -> ReadResourceRequest {
        ReadResourceRequest { uri: uri.into(), if_tag: tag.into(), ..Default::default() }
    }

    fn answer(tag: &str) -> Answer {
        Ok(ReadResourceResult { tag: tag.into(), unchanged: true, ..Default::default() })
    }

    /// Many identical questions at once: the first is asked alone, the rest share the next.
    #[tokio::test]
    async fn questions_that_arrive_together_share_the_next_one_asked() {
        let confirmations = Confirmations::default();
        let asked = AtomicUsize::new(0);
        let (release, released) = tokio::sync::watch::channel(false);
        let ask = |q: ReadResourceRequest| {
            let n = asked.fetch_add(1, Ordering::SeqCst);
            let mut released = released.clone();
            async move {
                // The first question waits to be let go, so that the others arrive meanwhile.
                if n == 0 {
                    let _ = released.wait_for(|r| *r).await;
                }
                answer(&format!("{}-{n}", q.if_tag))
            }
        };
        let calls: Vec<_> = (0..20).map(|_| confirmations.ask(question("file:///a", "t"), ask)).collect();
        let all = futures_util::future::join_all(calls);
        tokio::pin!(all);
        // Every call has begun and the first one's question is in flight.
        assert!(futures_util::poll!(&mut all).is_pending());
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        assert_eq!(confirmations.lines(), 1);
        release.send(true).expect("the first question waits");
        let answers = all.await;
        assert_eq!(asked.load(Ordering::SeqCst), 2, "the first question, then one for the other nineteen");
        assert_eq!(answers[0].as_ref().expect("answered").tag, "t-0");
        for later in &answers[1..] {
            assert_eq!(later.as_ref().expect("answered").tag, "t-1");
        }
        assert_eq!(confirmations.lines(), 0, "nothing is kept once answered");
    }

    /// A question asked after another was answered is asked again: answers are not reused.
    #[tokio::test]
    async fn a_question_after_an_answer_is_asked_anew() {
        let confirmations = Confirmations::default();
        let asked = AtomicUsize::new(0);
        for n in 0..3 {
            let got = confirmations
                .ask(question("file:///a", "t"), |_| {
                    asked.fetch_add(1, Ordering::SeqCst);
                    async move { answer(&n.to_string()) }
                })
                .await;
            assert_eq!(got.expect("answered").tag, n.to_string());
        }
        assert_eq!(asked.load(Ordering::SeqCst), 3);
    }

    /// Questions that differ in anything (the resource, the name held, the caller, its scopes)
    /// are asked apart, each answered its own answer; an error is shared as an answer is.
    #[tokio::test]
    async fn different_questions_are_asked_apart_and_errors_are_shared() {
        let confirmations = Confirmations::default();
        let asked = AtomicUsize::new(0);
        let (release, released) = tokio::sync::watch::channel(false);
        // Every question waits to be let go, then answers with what it was asked.
        let ask = |q: ReadResourceRequest| {
            asked.fetch_add(1, Ordering::SeqCst);
            let mut released = released.clone();
            async move {
                let _ = released.wait_for(|r| *r).await;
                if q.uri.ends_with('x') {
                    return Err(tonic::Status::not_found("gone"));
                }
                let caller = q.caller.map(|c| format!("{}:{}", c.subject, c.scopes.join(","))).unwrap_or_default();
                answer(&format!("{} {} {caller}", q.uri, q.if_tag))
            }
        };
        let caller = |subject: &str, scope: &str| {
            Some(mcp_proto::registry::Caller { subject: subject.into(), scopes: vec![scope.into()] })
        };
        let questions = [
            question("file:///a", "t"),
            question("file:///b", "t"),
            question("file:///a", "u"),
            ReadResourceRequest { caller: caller("alice", "read"), ..question("file:///a", "t") },
            ReadResourceRequest { caller: caller("bob", "read"), ..question("file:///a", "t") },
            ReadResourceRequest { caller: caller("alice", "write"), ..question("file:///a", "t") },
            question("file:///x", "t"),
            question("file:///x", "t"),
            question("file:///x", "t"),
        ];
        let all = futures_util::future::join_all(questions.into_iter().map(|q| confirmations.ask(q, ask)));
        tokio::pin!(all);
        // All in: seven different questions in flight at once, the two repeats waiting.
        assert!(futures_util::poll!(&mut all).is_pending());
        assert_eq!(asked.load(Ordering::SeqCst), 7);
        assert_eq!(confirmations.lines(), 7);
        release.send(true).expect("the questions wait");
        let answers = all.await;
        // The two repeats arrived while the first was in flight: they share the next one.
        assert_eq!(asked.load(Ordering::SeqCst), 8);
        let tags: Vec<&str> = answers[..6].iter().map(|a| a.as_ref().expect("answered").tag.as_str()).collect();
        assert_eq!(
            tags,
            [
                "file:///a t ",
                "file:///b t ",
                "file:///a u ",
                "file:///a t alice:read",
                "file:///a t bob:read",
                "file:///a t alice:write",
            ]
        );
        for gone in &answers[6..] {
            assert_eq!(gone.as_ref().expect_err("an error").code(), tonic::Code::NotFound);
        }
        assert_eq!(confirmations.lines(), 0);
    }

    /// A call dropped while its question is in flight lets the next one ask, and leaves nothing.
    #[tokio::test]
    async fn a_call_dropped_midway_leaves_the_next_to_ask() {
        let confirmations = Confirmations::default();
        let asked = AtomicUsize::new(0);
        {
            let first = confirmations.ask(question("file:///a", "t"), |_| {
                asked.fetch_add(1, Ordering::SeqCst);
                std::future::pending()
            });
            tokio::pin!(first);
            assert!(futures_util::poll!(&mut first).is_pending());
            assert_eq!(confirmations.lines(), 1);
        }
        assert_eq!(confirmations.lines(), 0);
        let got = confirmations
            .ask(question("file:///a", "t"), |_| {
                asked.fetch_add(1, Ordering::SeqCst);
                async { answer("t") }
            })
            .await;
        assert!(got.is_ok());
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }
}
