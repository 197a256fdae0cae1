//! Each generated operation as the backend runs it, with the inputs the
//! run fixed for it; the model runs it in [`Run::apply_model`].

use super::*;

impl Run<'_> {
    /// Runs an operation on the backend only; the model follows in
    /// [`Run::apply_model`] with the same inputs.
    pub async fn apply_store(&self, op: &Op, input: &Input) -> Answer {
        let store = self.store;
        let now = self.now;
        match (op, input) {
            (Op::Insert { .. }, Input::Insert(task)) => {
                store
                    .task_insert_many(TaskInsertMany {
                        tasks: vec![(**task).clone()],
                        now,
                    })
                    .await
                    .unwrap();
                Answer::Inserted
            }
            (Op::Advance(_), _) => Answer::Advanced,
            (Op::Poll, _) => {
                let report = store
                    .task_enqueue_ready(TaskEnqueueReady {
                        now,
                        limit: 1000,
                        enqueue_timeout: Duration::from_millis(ENQUEUE_TIMEOUT as u64),
                    })
                    .await
                    .unwrap();
                assert_eq!(report.paced, 0, "no lambda has a quota");
                crate::PARKED.fetch_add(report.parked, Ordering::Relaxed);
                crate::KEY_PACED.fetch_add(report.key_paced, Ordering::Relaxed);
                let mut enqueued: Vec<_> = report
                    .enqueued
                    .into_iter()
                    .map(|t| (t.id, t.enqueue_token))
                    .collect();
                enqueued.sort();
                Answer::Poll(PollAnswer {
                    enqueued,
                    held: report.held,
                    dropped: report.dropped,
                    dead: report.dead,
                    parked: report.parked,
                    key_paced: report.key_paced,
                })
            }
            (Op::Claim(..), Input::Task(id, token)) => {
                let answer = store
                    .task_claim_many(TaskClaimMany {
                        claims: vec![(id.clone(), *token)],
                        now,
                        claim_timeout: Duration::from_millis(CLAIM_TIMEOUT as u64),
                    })
                    .await
                    .unwrap()
                    .remove(0);
                Answer::Claim(answer.map_err(counted).map(|c| {
                    let generation = c.journal_generation;
                    self.leases
                        .lock()
                        .unwrap()
                        .insert(id.clone(), c.lease_token);
                    (
                        c.attempt,
                        lease_counter(c.lease_token),
                        c.lambda_version,
                        c.journal_len,
                        generation,
                    )
                }))
            }
            (Op::Heartbeat(..), Input::Task(id, lease)) => Answer::Heartbeat(
                store
                    .task_heartbeat_many(TaskHeartbeatMany {
                        beats: vec![Heartbeat {
                            id: id.clone(),
                            lease_token: self.backend_lease(id, *lease),
                            progress: Some("half\0way".into()),
                        }],
                        now,
                        heartbeat_timeout: Duration::from_millis(HEARTBEAT_TIMEOUT as u64),
                    })
                    .await
                    .unwrap()
                    .remove(0)
                    .map_err(counted),
            ),
            (
                Op::Journal(..),
                Input::Journal {
                    id,
                    lease,
                    version,
                    write,
                    after,
                },
            ) => Answer::Journal(
                match store
                    .task_journal_write(TaskJournalWrite {
                        id: id.clone(),
                        lease_token: self.backend_lease(id, *lease),
                        version: *version,
                        write: write.clone(),
                        part: after.map(|after| JournalPart {
                            after,
                            start: write.from,
                            more: false,
                        }),
                        generation: None,
                    })
                    .await
                {
                    Ok(answer) => Ok(answer.map_err(counted)),
                    Err(StoreError::Invalid(_)) => Err(Unwritten::Hole),
                    Err(StoreError::JournalOutOfTurn { .. }) => Err(Unwritten::OutOfTurn),
                    Err(other) => panic!("journal write failed: {other}"),
                },
            ),
            (
                Op::Result(_, _, ending, _),
                Input::Result {
                    id,
                    lease,
                    journal,
                    replayed,
                    children,
                },
            ) => {
                let outcome = match ending {
                    Ending::Success => ResultOutcome::Success {
                        output: Some(vec![0, 1, 2]),
                    },
                    Ending::Fatal => ResultOutcome::Fatal {
                        error: "fatal\0\\".into(),
                    },
                    Ending::Retriable(after) => ResultOutcome::Retriable {
                        error: "again".into(),
                        retry_after: Some(Duration::from_millis(*after)),
                    },
                    Ending::Suspend(after) => ResultOutcome::Suspend {
                        until: now + *after as i64,
                        wait: Wait::Timer,
                    },
                    Ending::AwaitSignal { after, name, taken } => ResultOutcome::Suspend {
                        until: now + *after as i64,
                        wait: Wait::Signal {
                            name: SIGNALS[*name].into(),
                            taken: *taken,
                        },
                    },
                    Ending::AwaitChildren => ResultOutcome::Suspend {
                        until: now + CENTURY,
                        wait: Wait::Children {
                            ids: children.clone(),
                        },
                    },
                };
                let answer = store
                    .task_set_result_many(TaskSetResultMany {
                        results: vec![TaskResult {
                            id: id.clone(),
                            lease_token: self.backend_lease(id, *lease),
                            outcome,
                            log: Some("log\0".into()),
                            journal: journal.clone(),
                            replayed: *replayed,
                        }],
                        now,
                    })
                    .await;
                Answer::Result(match answer {
                    Ok(mut answers) => Ok(answers.remove(0).map_err(counted)),
                    Err(StoreError::Invalid(_)) => Err(Hole),
                    Err(other) => panic!("result failed: {other}"),
                })
            }
            (Op::Cancel(_), Input::Task(id, _)) => {
                Answer::Cancel(match store.task_cancel(id, now).await {
                    Ok(task) => {
                        assert_eq!(task.status, TaskStatus::Cancelled);
                        CancelAnswer::Cancelled
                    }
                    Err(StoreError::TaskNotFound(_)) => CancelAnswer::NotFound,
                    Err(StoreError::AlreadyEnded { status, .. }) => {
                        CancelAnswer::AlreadyEnded(status)
                    }
                    Err(other) => panic!("cancel failed: {other}"),
                })
            }
            (Op::Signal { .. }, Input::Signal(id, name)) => {
                let signal = TaskSignal {
                    id: id.clone(),
                    name: (*name).into(),
                    payload: name.as_bytes().to_vec(),
                    now,
                };
                Answer::Signal(match store.task_signal(signal).await {
                    Ok(sent) => SignalAnswer::Sent {
                        seq: sent.seq,
                        woke: sent.woke,
                    },
                    Err(StoreError::TaskNotFound(_)) => SignalAnswer::NotFound,
                    Err(StoreError::AlreadyEnded { status, .. }) => {
                        SignalAnswer::AlreadyEnded(status)
                    }
                    Err(other) => panic!("signal failed: {other}"),
                })
            }
            (
                Op::Gate {
                    lambda,
                    collection,
                    state,
                },
                _,
            ) => Answer::Gate(
                store
                    .gate_set(GateSet {
                        lambda: LAMBDAS[*lambda].into(),
                        collection: collection.map(|c| COLLECTIONS[c].to_owned()),
                        state: *state,
                        now,
                    })
                    .await
                    .unwrap(),
            ),
            (Op::Redrive { fresh, .. }, Input::Task(id, _)) => Answer::Redrive(
                match store
                    .dead_redrive(DeadRedrive {
                        selector: DeadSelector::Ids(vec![id.clone()]),
                        version: None,
                        fresh: *fresh,
                        now,
                    })
                    .await
                {
                    Ok(1) => RedriveAnswer::Redriven,
                    Ok(n) => panic!("redrove {n} tasks of one id"),
                    Err(StoreError::TaskNotFound(_)) => RedriveAnswer::NotFound,
                    Err(StoreError::NotDead { status, .. }) => RedriveAnswer::NotDead(status),
                    Err(other) => panic!("redrive failed: {other}"),
                },
            ),
            (Op::Recover, _) => Answer::Recovered(store.task_recover(now).await.unwrap()),
            (Op::Deploy(lambda), _) => Answer::Deployed(
                store
                    .lambda_deploy(deploy_params(LAMBDAS[*lambda]))
                    .await
                    .unwrap()
                    .version,
            ),
            (Op::Materialize { lambda, .. }, Input::Cron(expected)) => {
                let schedule = format!("cron-{}", LAMBDAS[*lambda]);
                let answer = store
                    .cron_materialize(CronMaterialize {
                        cron_id: schedule,
                        expected: *expected,
                        occurrence: *expected,
                        next_at: expected + CRON_PERIOD,
                        now,
                    })
                    .await
                    .unwrap();
                match answer {
                    Materialized::Created(_) => Answer::Materialized(true),
                    Materialized::AlreadyDone => Answer::Materialized(false),
                    Materialized::Skipped(why) => panic!("occurrence skipped: {why}"),
                }
            }
            (_, Input::Nothing) => Answer::Skipped,
            other => unreachable!("{other:?}"),
        }
    }
}
