//! A (transactional) producer over librdkafka's `BaseProducer` that sends whole Arrow batches (`rows.rs`) with no
//! Python per record and the GIL released (py_producer.rs): the restore's producer with `producer: native`
//! (`restore/native_producer.py` is its one caller; `bench/tools/produce_ab.py` measures it). Its errors carry librdkafka's code and flags (retriable, abortable,
//! fatal) so a caller classifies them as it classifies confluent-kafka's. Delivery reports are counted here; a
//! batch sent with `track` also keeps the first and last offset delivered to each partition (the offset map's runs).

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::bindings as rd;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, PurgeConfig};
use rdkafka::util::Timeout;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::rows::Rows;

/// Records sent between two polls of the delivery reports.
const POLL_EVERY: usize = 1024;

/// A failed call: librdkafka's code (its number, as confluent-kafka's `KafkaError.code()`), its text, and whether
/// it is retriable, requires aborting the transaction, or is fatal (the producer is unusable; the code then is the
/// underlying fatal error's, e.g. fenced).
#[derive(Debug)]
pub struct Failure {
    pub text: String,
    pub code: i32,
    pub retriable: bool,
    pub requires_abort: bool,
    pub fatal: bool,
}

impl Failure {
    pub fn plain(text: String, code: RDKafkaErrorCode) -> Failure {
        Failure { text, code: code as i32, retriable: false, requires_abort: false, fatal: false }
    }
}

/// The first and last offset delivered to one partition of a tracked batch, and how many records were.
#[derive(Clone, Copy)]
pub struct Span {
    pub partition: i32,
    pub first: i64,
    pub last: i64,
    pub count: u64,
}

#[derive(Default)]
struct State {
    delivered: u64,
    failed: u64,
    first_error: Option<(i32, String)>,
    tracked: HashMap<usize, Vec<Span>>,
}

/// Delivery reports and the last error event's reason; logs go nowhere (nothing here can print a setting).
#[derive(Default)]
pub struct Reports {
    state: Mutex<State>,
    reason: Mutex<Option<(RDKafkaErrorCode, String)>>,
}

impl ClientContext for Reports {
    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, _fac: &str, _log_message: &str) {}

    fn error(&self, error: KafkaError, reason: &str) {
        if let (Some(code), Ok(mut last)) = (error.rdkafka_error_code(), self.reason.lock()) {
            *last = Some((code, reason.to_string()));
        }
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize; // the tracked batch's id; 0: not tracked

    fn delivery(&self, result: &DeliveryResult<'_>, batch: usize) {
        let Ok(mut s) = self.state.lock() else { return };
        match result {
            Ok(m) => {
                s.delivered += 1;
                if batch != 0 {
                    let (p, o) = (m.partition(), m.offset());
                    let spans = s.tracked.entry(batch).or_default();
                    match spans.iter_mut().find(|x| x.partition == p) {
                        Some(x) => {
                            x.first = x.first.min(o);
                            x.last = x.last.max(o);
                            x.count += 1;
                        }
                        None => spans.push(Span { partition: p, first: o, last: o, count: 1 }),
                    }
                }
            }
            Err((e, _)) => {
                s.failed += 1;
                if s.first_error.is_none() {
                    let code = e.rdkafka_error_code().map_or(-1, |c| c as i32);
                    s.first_error = Some((code, e.to_string()));
                }
            }
        }
    }
}

/// What was delivered since the last `take`.
pub struct Deliveries {
    pub delivered: u64,
    pub failed: u64,
    pub first_error: Option<(i32, String)>,
    pub tracked: Vec<(usize, Span)>,
}

pub struct NativeProducer {
    producer: BaseProducer<Reports>,
    batches: AtomicUsize,
    servers: String,
}

fn timeout(s: f64) -> Timeout {
    Timeout::After(Duration::from_secs_f64(s.max(0.0)))
}

impl NativeProducer {
    /// A producer with `config` (the Python side's whole producer configuration: SASL/TLS keys pass through).
    pub fn open(config: &[(String, String)], servers: String) -> Result<Self, Failure> {
        let mut cfg = ClientConfig::new();
        for (k, v) in config {
            cfg.set(k, v);
        }
        // A configuration error names the setting, never its value (it may be a password).
        let producer: BaseProducer<Reports> = cfg.create_with_context(Reports::default()).map_err(|e| {
            let what = match &e {
                KafkaError::ClientConfig(_, _, key, _) => format!("setting {key:?} was refused"),
                _ => "the client could not be created".to_string(),
            };
            Failure::plain(format!("a producer for Kafka at {servers}: {what}"), RDKafkaErrorCode::InvalidArgument)
        })?;
        Ok(NativeProducer { producer, batches: AtomicUsize::new(0), servers })
    }

    /// A failure of `what`, from a client error; a fatal one is replaced by the fatal error itself (e.g. fenced).
    fn failure(&self, what: &str, e: KafkaError) -> Failure {
        match &e {
            KafkaError::Transaction(t) => {
                self.classify(what, t.code(), t.string(), t.is_retriable(), t.txn_requires_abort(), t.is_fatal())
            }
            other => {
                let code = other.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
                let text = match self.producer.context().reason.lock().ok().and_then(|mut r| r.take()) {
                    Some((c, reason)) if c == code && !reason.is_empty() => reason,
                    _ => other.to_string(),
                };
                self.classify(what, code, text, false, false, false)
            }
        }
    }

    fn classify(&self, what: &str, mut code: RDKafkaErrorCode, mut text: String, retriable: bool,
                requires_abort: bool, mut fatal: bool) -> Failure {
        if fatal || code == RDKafkaErrorCode::Fatal {
            if let Some((c, t)) = self.fatal_error() {
                (code, text, fatal) = (c, t, true);
            }
        }
        Failure { text: format!("{what}: {text}"), code: code as i32, retriable, requires_abort, fatal }
    }

    /// The error that made the client unusable, if one did.
    pub fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        let mut buf = [0 as c_char; 512];
        // SAFETY: the client is alive; librdkafka writes a NUL-terminated string of at most buf.len() bytes.
        let err = unsafe { rd::rd_kafka_fatal_error(self.producer.client().native_ptr(), buf.as_mut_ptr(), buf.len()) };
        if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
        Some((RDKafkaErrorCode::from(err), text))
    }

    /// Wait up to `timeout_s` until a broker of the cluster (not a bootstrap address) answers a metadata request
    /// for `topic`: librdkafka asks a connected broker for the transaction coordinator at once in init_transactions
    /// and, finding none, asks again only 500 ms later; and it drops its bootstrap connection as soon as the first
    /// metadata names the cluster's brokers, so a client that only waited for that first answer still has no broker
    /// up while the learned one connects (init_transactions then took ~0.5 s in most runs). Whether one answered;
    /// not answering is no error here (the call that needs the connection reports it). The client must not
    /// auto-create topics.
    pub fn wait_connected(&self, topic: &str, timeout_s: f64) -> bool {
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s.max(0.0));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.producer.client().fetch_metadata(Some(topic), Timeout::After(left)) {
                // a learned broker has its node id; a bootstrap address has none (-1)
                Ok(md) if md.orig_broker_id() >= 0 => return true,
                _ if Instant::now() >= deadline => return false,
                Ok(_) => {}
                // e.g. the bootstrap connection closed under the request: not a busy loop
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    pub fn init_transactions(&self, timeout_s: f64) -> Result<(), Failure> {
        self.producer.init_transactions(timeout(timeout_s)).map_err(|e| self.failure("init_transactions", e))
    }

    pub fn begin_transaction(&self) -> Result<(), Failure> {
        self.producer.begin_transaction().map_err(|e| self.failure("begin_transaction", e))
    }

    /// Commits once every queued record is delivered (drained here first: rdkafka's own flush serves reports in
    /// 100 ms slices, a tenth of a second lost per commit).
    pub fn commit_transaction(&self, timeout_s: f64) -> Result<(), Failure> {
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s.max(0.0));
        self.drain(deadline);
        let left = deadline.saturating_duration_since(Instant::now()).as_secs_f64();
        self.producer.commit_transaction(timeout(left)).map_err(|e| self.failure("commit_transaction", e))
    }

    /// Aborts; librdkafka's abort waits until the records queued or in flight are delivered or failed, and with the
    /// event queue this producer uses nobody else serves their reports: the call is made in short slices (it is
    /// resumable), serving the reports between them, until `timeout_s`.
    pub fn abort_transaction(&self, timeout_s: f64) -> Result<(), Failure> {
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s.max(0.0));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.producer.abort_transaction(Timeout::After(left.min(Duration::from_millis(100)))) {
                Ok(()) => return Ok(()),
                Err(KafkaError::Transaction(t)) if t.is_retriable() && !left.is_zero() => {
                    self.producer.poll(Duration::from_millis(5));
                }
                Err(e) => return Err(self.failure("abort_transaction", e)),
            }
        }
    }

    /// The consumer group `group_id`'s offsets (topic, partition, offset, metadata) committed with the transaction.
    pub fn send_offsets_to_transaction(&self, offsets: &[(String, i32, i64, String)], group_id: &str,
                                       timeout_s: f64) -> Result<(), Failure> {
        let mut tpl = TopicPartitionList::with_capacity(offsets.len());
        for (topic, partition, offset, metadata) in offsets {
            let mut elem = tpl.add_partition(topic, *partition);
            elem.set_offset(Offset::Offset(*offset)).map_err(|e| self.failure("send_offsets_to_transaction", e))?;
            // NUL-terminated, as confluent-kafka writes it (its readers take the metadata as a C string): the ledger
            // reads the same whichever client committed it
            elem.set_metadata(format!("{metadata}\0"));
        }
        let group = CString::new(group_id).map_err(|_| {
            Failure::plain("the consumer group id holds a NUL byte".into(), RDKafkaErrorCode::InvalidArgument)
        })?;
        let ms = match timeout(timeout_s) {
            Timeout::After(d) => d.as_millis().min(i32::MAX as u128) as i32,
            Timeout::Never => -1,
        };
        // SAFETY: the client, the list and the metadata are alive for the call; the metadata is destroyed after it,
        // and the returned error (if any) is read, then destroyed here.
        let failed = unsafe {
            let cgm = rd::rd_kafka_consumer_group_metadata_new(group.as_ptr());
            let err = rd::rd_kafka_send_offsets_to_transaction(self.producer.client().native_ptr(), tpl.ptr(), cgm, ms);
            rd::rd_kafka_consumer_group_metadata_destroy(cgm);
            if err.is_null() {
                None
            } else {
                let code = RDKafkaErrorCode::from(rd::rd_kafka_error_code(err));
                let text = CStr::from_ptr(rd::rd_kafka_error_string(err)).to_string_lossy().into_owned();
                let flags = (rd::rd_kafka_error_is_retriable(err) != 0, rd::rd_kafka_error_txn_requires_abort(err) != 0,
                             rd::rd_kafka_error_is_fatal(err) != 0);
                rd::rd_kafka_error_destroy(err);
                Some((code, text, flags))
            }
        };
        match failed {
            None => Ok(()),
            Some((code, text, (retriable, requires_abort, fatal))) => {
                Err(self.classify("send_offsets_to_transaction", code, text, retriable, requires_abort, fatal))
            }
        }
    }

    /// Serve delivery reports for up to `timeout_s`.
    pub fn poll(&self, timeout_s: f64) {
        self.producer.poll(timeout(timeout_s));
    }

    /// Wait until every queued record is delivered (or failed), up to `timeout_s`; how many are left.
    pub fn flush(&self, timeout_s: f64) -> Result<i32, Failure> {
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s.max(0.0));
        Ok(if self.drain(deadline) { 0 } else { self.producer.in_flight_count().max(1) })
    }

    /// Serve delivery reports until nothing is queued, in flight or unreported (true), or until `deadline`.
    fn drain(&self, deadline: Instant) -> bool {
        loop {
            // SAFETY: the client is alive; a zero timeout only checks librdkafka's count of outstanding messages.
            let done = unsafe { rd::rd_kafka_flush(self.producer.client().native_ptr(), 0) };
            if done == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.producer.poll(Duration::from_millis(2));
        }
    }

    /// Drop what is queued or in flight (their reports fail with "purged").
    pub fn purge(&self) {
        self.producer.purge(PurgeConfig::default().queue().inflight());
        self.producer.poll(Duration::ZERO);
    }

    pub fn in_flight(&self) -> i32 {
        self.producer.in_flight_count()
    }

    pub fn take(&self) -> Deliveries {
        let mut s = self.producer.context().state.lock().expect("the delivery state is never poisoned");
        let s = std::mem::take(&mut *s);
        let mut tracked: Vec<(usize, Span)> =
            s.tracked.into_iter().flat_map(|(b, spans)| spans.into_iter().map(move |x| (b, x))).collect();
        tracked.sort_by_key(|(b, x)| (*b, x.partition));
        Deliveries { delivered: s.delivered, failed: s.failed, first_error: s.first_error, tracked }
    }

    /// Queue every record of `rows` to `topic`, in order; waits while the local queue is full, for at most
    /// `queue_full_s` without progress. Returns the batch's id for `take`'s tracked spans (0 when not `track`).
    /// On an error the records before the failing one stay queued (`Failure::text` says how many).
    pub fn produce(&self, topic: &str, rows: &Rows, track: bool, queue_full_s: f64) -> Result<usize, Failure> {
        let n = rows.check().map_err(|t| Failure::plain(t, RDKafkaErrorCode::InvalidArgument))?;
        let batch = if track { self.batches.fetch_add(1, Ordering::Relaxed) + 1 } else { 0 };
        let with_headers = rows.any_headers();
        let stuck = Duration::from_secs_f64(queue_full_s.max(0.0));
        for i in 0..n {
            let row = rows.row(i);
            let mut record: BaseRecord<'_, [u8], [u8], usize> =
                BaseRecord::with_opaque_to(topic, batch).partition(row.partition).timestamp(row.timestamp);
            record.key = row.key;
            record.payload = row.value;
            if with_headers {
                let mut h = Some(OwnedHeaders::new_with_capacity(4));
                let count = rows.headers_of(i, |key, value| {
                    h = h.take().map(|hs| hs.insert(Header { key, value }));
                });
                if count > 0 {
                    record = record.headers(h.take().expect("the headers are kept between inserts"));
                }
            }
            let mut full_since: Option<Instant> = None;
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        let since = *full_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > stuck {
                            return Err(Failure {
                                text: format!(
                                    "the producer's queue stayed full for {:.0}s ({i} of {n} records of the batch \
                                     queued): Kafka at {} takes no records",
                                    stuck.as_secs_f64(),
                                    self.servers
                                ),
                                code: RDKafkaErrorCode::QueueFull as i32,
                                retriable: true,
                                requires_abort: false,
                                fatal: false,
                            });
                        }
                        self.producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => {
                        let what = format!("producing record {i} of {n} of the batch to {topic:?}");
                        return Err(self.failure(&what, e));
                    }
                }
            }
            if i % POLL_EVERY == POLL_EVERY - 1 {
                self.producer.poll(Duration::ZERO);
            }
        }
        self.producer.poll(Duration::ZERO);
        Ok(batch)
    }
}
