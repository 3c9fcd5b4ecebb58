//! Offsets [start, end) of one partition read `read_committed`, as `executor/kafka_read.py::read_range` reads them
//! (its docstring is the contract): a record at or past `end`, or the consumer's position at or past `end` (which
//! librdkafka moves past transaction markers and aborted records) ends the read; offsets deleted by retention are
//! skipped to the log start; a read that makes no progress for `stall` fails naming what was not read; a refusal
//! (credentials, TLS, ACLs, a fatal error) fails at once with `KafkaRefused` in its text. Batches are cut as the
//! Python reader cuts them: after a poll round holding at least `batch_records` records or `batch_bytes` of values.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::envelope::EnvelopeBuilder;

const ROUND: Duration = Duration::from_millis(500);

/// Keeps librdkafka's reason for the last error event (the text the Python client's `err.str()` gives): the
/// consumer's poll hands back only the code. Logs go nowhere: nothing here can print a setting.
#[derive(Default)]
pub struct Reasons {
    last: Mutex<Option<(RDKafkaErrorCode, String)>>,
}

impl ClientContext for Reasons {
    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, _fac: &str, _log_message: &str) {}

    fn error(&self, error: KafkaError, reason: &str) {
        if let (Some(code), Ok(mut last)) = (error.rdkafka_error_code(), self.last.lock()) {
            *last = Some((code, reason.to_string()));
        }
    }
}

impl ConsumerContext for Reasons {}

impl Reasons {
    fn text(&self, code: RDKafkaErrorCode) -> String {
        let kept = self.last.lock().ok().and_then(|mut l| l.take());
        match kept {
            Some((c, reason)) if c == code && !reason.is_empty() => reason,
            _ => description(code),
        }
    }
}

/// librdkafka's own description of a code (what `rd_kafka_err2str` gives), without the enum's name.
fn description(code: RDKafkaErrorCode) -> String {
    let shown = code.to_string();
    match (shown.find('('), shown.ends_with(')')) {
        (Some(i), true) => shown[i + 1..shown.len() - 1].to_string(),
        _ => shown,
    }
}

fn refused(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::SSL
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
    )
}

/// What one range is and how it is read.
pub struct Range {
    pub servers: String,
    pub topic: String,
    pub partition: i32,
    pub start: i64,
    pub end: i64,
    pub stall: Duration,
    pub batch_records: usize,
    pub batch_bytes: usize,
}

pub struct RangeReader {
    range: Range,
    consumer: Option<BaseConsumer<Reasons>>,
    pending: EnvelopeBuilder,
    position: i64,
    progress: Instant,
    last_error: String,
    done: bool,
}

enum Round {
    Going,
    Done,
}

impl RangeReader {
    /// A consumer with `config` (the Python side's whole consumer configuration) assigned at `range.start`.
    pub fn open(config: &[(String, String)], range: Range) -> Result<Self, String> {
        let mut cfg = ClientConfig::new();
        for (k, v) in config {
            cfg.set(k, v);
        }
        let position = range.start;
        let mut reader = RangeReader {
            consumer: None,
            pending: EnvelopeBuilder::new(),
            position,
            progress: Instant::now(),
            last_error: String::new(),
            done: false,
            range,
        };
        if reader.range.start >= reader.range.end {
            return Ok(reader);
        }
        // A configuration error names the setting, never its value (it may be a password).
        let consumer: BaseConsumer<Reasons> = cfg.create_with_context(Reasons::default()).map_err(|e| {
            let what = match &e {
                KafkaError::ClientConfig(_, _, key, _) => format!("setting {key:?} was refused"),
                _ => "the client could not be created".to_string(),
            };
            format!("reading {} from Kafka at {}: {what} (KafkaRefused)", reader.where_(), reader.range.servers)
        })?;
        reader.consumer = Some(consumer);
        reader.assign(position)?;
        Ok(reader)
    }

    fn where_(&self) -> String {
        format!("topic {} partition {}", py_repr(&self.range.topic), self.range.partition)
    }

    fn assign(&self, at: i64) -> Result<(), String> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.range.topic, self.range.partition, Offset::Offset(at))
            .and_then(|_| self.consumer().assign(&tpl))
            .map_err(|e| format!("assigning {} at offset {at} failed: {e}", self.where_()))
    }

    fn consumer(&self) -> &BaseConsumer<Reasons> {
        self.consumer.as_ref().expect("an open reader has a consumer")
    }

    /// The next envelope batch, or None once the range is read (the consumer is closed then).
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, String> {
        if self.consumer.is_none() {
            return Ok(None);
        }
        let result = if self.done { Ok(None) } else { self.read_until_batch() };
        if !matches!(result, Ok(Some(_))) {
            self.consumer = None;
        }
        result
    }

    fn read_until_batch(&mut self) -> Result<Option<RecordBatch>, String> {
        while self.position < self.range.end {
            let before = self.pending.records;
            let mut round = self.poll_round()?;
            if self.pending.records > before {
                self.progress = Instant::now();
            }
            if matches!(round, Round::Going) {
                round = self.check_position();
            }
            let done = matches!(round, Round::Done);
            let full = self.pending.records >= self.range.batch_records || self.pending.value_bytes >= self.range.batch_bytes;
            if self.pending.records > 0 && (done || full) {
                self.done = done;
                return Ok(Some(self.finish()?));
            }
            if done {
                return Ok(None);
            }
            if self.progress.elapsed() > self.range.stall {
                return Err(self.stalled());
            }
        }
        if self.pending.records > 0 {
            return Ok(Some(self.finish()?));
        }
        Ok(None)
    }

    fn finish(&mut self) -> Result<RecordBatch, String> {
        self.pending.finish(&self.range.topic, self.range.partition).map_err(|e| e.to_string())
    }

    /// One round as the Python reader's `consume(n, 0.5)`: messages until `n` came, an error or the partition's end
    /// was seen, or half a second passed.
    fn poll_round(&mut self) -> Result<Round, String> {
        let want = self.range.batch_records.min((self.range.end - self.position).max(1) as usize);
        let deadline = Instant::now() + ROUND;
        let mut seen = 0usize;
        while seen < want {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(polled) = self.consumer.as_ref().expect("an open reader has a consumer").poll(left) else {
                break;
            };
            seen += 1;
            match polled {
                Ok(m) => {
                    if m.offset() >= self.range.end {
                        return Ok(Round::Done);
                    }
                    self.pending.append(&m);
                    self.position = m.offset() + 1;
                }
                Err(KafkaError::PartitionEOF(_)) => break,  // the position check below sees where it ended
                Err(e) => {
                    if let Some(round) = self.on_error(e)? {
                        return Ok(round);
                    }
                }
            }
            if left.is_zero() {
                break;
            }
        }
        Ok(Round::Going)
    }

    fn on_error(&mut self, e: KafkaError) -> Result<Option<Round>, String> {
        let fatal = matches!(e, KafkaError::MessageConsumptionFatal(_));
        let Some(code) = e.rdkafka_error_code() else {
            self.last_error = e.to_string();
            return Ok(None);
        };
        if code == RDKafkaErrorCode::AutoOffsetReset || code == RDKafkaErrorCode::OffsetOutOfRange {
            return self.skip_deleted();
        }
        let text = self.consumer().context().text(code);
        if fatal || refused(code) {
            return Err(format!(
                "reading offsets [{}, {}) of {} from Kafka at {} failed (KafkaRefused): {text}",
                self.position,
                self.range.end,
                self.where_(),
                self.range.servers
            ));
        }
        self.last_error = text;  // a lost connection, a moved leader: librdkafka retries; the stall deadline bounds it
        Ok(None)
    }

    /// Offsets deleted by retention: what is left is read from the log start (the driver sees the log start move).
    fn skip_deleted(&mut self) -> Result<Option<Round>, String> {
        let (low, _) = self
            .consumer()
            .fetch_watermarks(&self.range.topic, self.range.partition, Duration::from_secs(10))
            .map_err(|e| format!("reading {} from Kafka at {}: its log start could not be read: {e}",
                                 self.where_(), self.range.servers))?;
        if low >= self.range.end {
            return Ok(Some(Round::Done));
        }
        self.assign(low.max(self.position))?;
        if low > self.position {  // else the log ends below the position (truncated): the stall deadline ends it
            self.progress = Instant::now();
        }
        Ok(None)
    }

    /// The consumer's position: past `end` ends the read (markers, aborted records); past ours is progress.
    fn check_position(&mut self) -> Round {
        let at = self.consumer().position().ok().and_then(|tpl| {
            tpl.find_partition(&self.range.topic, self.range.partition).and_then(|p| p.offset().to_raw())
        });
        match at {
            Some(at) if at >= self.range.end => Round::Done,
            Some(at) if at > self.position => {
                self.position = at;
                self.progress = Instant::now();
                Round::Going
            }
            _ => Round::Going,
        }
    }

    fn stalled(&self) -> String {
        let last = if self.last_error.is_empty() { String::new() } else { format!("; last: {}", self.last_error) };
        format!(
            "reading {} from Kafka at {}: no progress at offset {} for {:.0}s (offsets [{}, {}) not read: the broker \
             is unreachable, or a transaction below the window's end is still open){last}",
            self.where_(),
            self.range.servers,
            self.position,
            self.range.stall.as_secs_f64(),
            self.position,
            self.range.end
        )
    }
}

/// A name as Python's repr shows it in the Python reader's errors ('topic').
fn py_repr(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\'', "\\'"))
    }
}
