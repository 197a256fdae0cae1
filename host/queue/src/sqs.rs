//! Queues on Amazon SQS, or any server that speaks its JSON protocol.
//!
//! One SQS queue per `<lambda, priority>`, created on first use and its URL
//! cached. Sends, receives and acknowledgements go ten at a time (SQS's
//! batch limit); receives long-poll. A deleted lambda's queues are deleted
//! (`DeleteQueue`); a process that still had one's URL forgets it when SQS
//! answers that the queue does not exist, so a lambda deployed again under
//! the same name gets a new queue.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

use crate::{Delivery, QueueError, QueueKey, QueueMessage, TaskQueue};

/// A message's trace context as SQS message attributes (none when the
/// enqueue was not traced).
fn trace_attributes(
    message: &QueueMessage,
) -> Result<Vec<(&'static str, MessageAttributeValue)>, QueueError> {
    let values = [&message.traceparent, &message.tracestate];
    TRACE_ATTRIBUTES
        .into_iter()
        .zip(values)
        .filter_map(|(name, value)| Some((name, value.as_deref()?)))
        .map(|(name, value)| {
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map(|value| (name, value))
                .map_err(|e| service("build a message attribute", e))
        })
        .collect()
}

/// A decoded message with the trace context its attributes carry.
fn with_trace(mut decoded: QueueMessage, message: &aws_sdk_sqs::types::Message) -> QueueMessage {
    let attribute = |name: &str| {
        message
            .message_attributes()
            .and_then(|attributes| attributes.get(name))
            .and_then(|value| value.string_value())
            .map(str::to_owned)
    };
    decoded.traceparent = attribute("traceparent");
    decoded.tracestate = attribute("tracestate");
    decoded
}

/// SQS's largest batch.
const BATCH: usize = 10;
/// The message attributes that carry a message's trace context.
const TRACE_ATTRIBUTES: [&str; 2] = ["traceparent", "tracestate"];

/// SQS's longest long poll.
const MAX_WAIT: Duration = Duration::from_secs(20);

/// Where and how to reach SQS: the `[queue.sqs]` section of a
/// configuration file, and the visibility timeout that the `[queue]`
/// section sets for every kind.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SqsConfig {
    /// An SQS-compatible endpoint (`http://127.0.0.1:4566`); AWS's own when
    /// `None`, with credentials from the environment.
    pub endpoint_url: Option<String>,
    pub region: String,
    /// Queue names start with it, so several Waft installations can share
    /// an account.
    pub prefix: String,
    /// How long a received message stays invisible before it is delivered
    /// again unless acknowledged. Not a key of `[queue.sqs]`: every kind of
    /// queue has one, so the file sets it in `[queue]`.
    #[serde(skip)]
    pub visibility_timeout: Duration,
}

impl Default for SqsConfig {
    fn default() -> Self {
        Self {
            endpoint_url: None,
            region: "us-east-1".into(),
            prefix: "waft".into(),
            visibility_timeout: Duration::from_secs(30),
        }
    }
}

/// The HTTP client of Waft's SQS clients: HTTPS with rustls and ring (see
/// the workspace's Cargo.toml), as every other TLS connection of Waft.
pub fn https_client() -> aws_sdk_sqs::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// The queues on SQS.
#[derive(Debug)]
pub struct SqsQueue {
    client: Client,
    config: SqsConfig,
    urls: RwLock<HashMap<QueueKey, String>>,
}

impl SqsQueue {
    /// A client for `config`. With an explicit endpoint (a local
    /// SQS-compatible server) it uses static dummy credentials.
    pub async fn new(config: SqsConfig) -> Self {
        let http = https_client();
        let client = match &config.endpoint_url {
            Some(endpoint) => {
                let sqs = aws_sdk_sqs::Config::builder()
                    .behavior_version(BehaviorVersion::latest())
                    .http_client(http)
                    .endpoint_url(endpoint)
                    .region(Region::new(config.region.clone()))
                    .credentials_provider(Credentials::new("waft", "waft", None, None, "static"))
                    .build();
                Client::from_conf(sqs)
            }
            None => {
                let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .http_client(http)
                    .region(Region::new(config.region.clone()))
                    .load()
                    .await;
                Client::new(&shared)
            }
        };
        Self {
            client,
            config,
            urls: RwLock::default(),
        }
    }

    /// The queue's URL, creating the queue the first time.
    async fn url(&self, key: &QueueKey) -> Result<String, QueueError> {
        if let Some(url) = self.cached(key) {
            return Ok(url);
        }
        let name = key.queue_name(&self.config.prefix);
        let created = self
            .client
            .create_queue()
            .queue_name(&name)
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                self.config.visibility_timeout.as_secs().max(1).to_string(),
            )
            .send()
            .await
            .map_err(|e| service(&format!("create queue {name}"), e))?;
        let url = created
            .queue_url()
            .ok_or_else(|| {
                QueueError::Service(format!("create queue {name}: no URL in the answer"))
            })?
            .to_owned();
        self.urls
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), url.clone());
        Ok(url)
    }

    fn cached(&self, key: &QueueKey) -> Option<String> {
        let urls = self.urls.read().unwrap_or_else(PoisonError::into_inner);
        urls.get(key).cloned()
    }

    fn forget(&self, key: &QueueKey) {
        let mut urls = self.urls.write().unwrap_or_else(PoisonError::into_inner);
        urls.remove(key);
    }

    /// The error of a call on `key`'s queue; if SQS says the queue does not
    /// exist (another process deleted it), its cached URL is forgotten.
    fn failed<E>(&self, key: &QueueKey, what: &str, error: E) -> QueueError
    where
        E: std::error::Error + ProvideErrorMetadata,
    {
        if gone(&error) {
            self.forget(key);
        }
        service(what, error)
    }
}

/// Whether SQS answered that the queue does not exist (the JSON protocol's
/// code, and the query protocol's).
fn gone(error: &impl ProvideErrorMetadata) -> bool {
    matches!(
        error.code(),
        Some("QueueDoesNotExist" | "AWS.SimpleQueueService.NonExistentQueue")
    )
}

fn service(what: &str, error: impl std::error::Error) -> QueueError {
    let mut message = format!("{what}: {error}");
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    QueueError::Service(message)
}

#[async_trait]
impl TaskQueue for SqsQueue {
    async fn queue_send_many(
        &self,
        key: &QueueKey,
        messages: Vec<QueueMessage>,
    ) -> Result<(), QueueError> {
        let url = self.url(key).await?;
        for chunk in messages.chunks(BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, message)| {
                    let mut entry = SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(message.encode());
                    for (name, value) in trace_attributes(message)? {
                        entry = entry.message_attributes(name, value);
                    }
                    entry.build().map_err(|e| service("build a send entry", e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let answer = self
                .client
                .send_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| self.failed(key, "send messages", e))?;
            if let Some(failed) = answer.failed().first() {
                return Err(QueueError::Service(format!(
                    "send messages: {} of {} failed, first: {} {}",
                    answer.failed().len(),
                    chunk.len(),
                    failed.code(),
                    failed.message().unwrap_or_default()
                )));
            }
        }
        Ok(())
    }

    async fn queue_receive(
        &self,
        key: &QueueKey,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let url = self.url(key).await?;
        let answer = self
            .client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(max.clamp(1, BATCH) as i32)
            .wait_time_seconds(wait.min(MAX_WAIT).as_secs() as i32)
            .set_message_attribute_names(Some(TRACE_ATTRIBUTES.map(String::from).to_vec()))
            .send()
            .await
            .map_err(|e| self.failed(key, "receive messages", e))?;
        let mut deliveries = Vec::new();
        let mut foreign = Vec::new();
        for message in answer.messages() {
            let (Some(body), Some(receipt)) = (message.body(), message.receipt_handle()) else {
                continue;
            };
            match QueueMessage::decode(body) {
                Ok(decoded) => deliveries.push(Delivery {
                    message: with_trace(decoded, message),
                    receipt: receipt.to_owned(),
                }),
                Err(error) => {
                    // Not ours: drop it rather than see it again forever.
                    tracing::warn!(queue = %key, %error, "discarding a foreign message");
                    foreign.push(receipt.to_owned());
                }
            }
        }
        if !foreign.is_empty() {
            self.queue_ack_many(key, foreign).await?;
        }
        Ok(deliveries)
    }

    async fn queue_ack_many(
        &self,
        key: &QueueKey,
        receipts: Vec<String>,
    ) -> Result<(), QueueError> {
        let url = self.url(key).await?;
        for chunk in receipts.chunks(BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, receipt)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(receipt)
                        .build()
                        .map_err(|e| service("build a delete entry", e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let answer = self
                .client
                .delete_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| self.failed(key, "acknowledge messages", e))?;
            for failed in answer.failed() {
                // A stale receipt: the message was delivered again.
                tracing::debug!(queue = %key, code = failed.code(), "acknowledgement refused");
            }
        }
        Ok(())
    }

    async fn queue_delete(&self, key: &QueueKey) -> Result<(), QueueError> {
        let name = key.queue_name(&self.config.prefix);
        let url = match self.cached(key) {
            Some(url) => url,
            None => match self.client.get_queue_url().queue_name(&name).send().await {
                Ok(found) => match found.queue_url() {
                    Some(url) => url.to_owned(),
                    None => return Ok(()),
                },
                Err(error) if gone(&error) => return Ok(()),
                Err(error) => return Err(service(&format!("find queue {name}"), error)),
            },
        };
        self.forget(key);
        match self.client.delete_queue().queue_url(&url).send().await {
            Ok(_) => Ok(()),
            Err(error) if gone(&error) => Ok(()),
            Err(error) => Err(service(&format!("delete queue {name}"), error)),
        }
    }

    async fn queue_depth(&self, key: &QueueKey) -> Result<u64, QueueError> {
        let url = self.url(key).await?;
        let answer = self
            .client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| self.failed(key, "read the queue depth", e))?;
        Ok(answer
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }
}
