//! The producer's Python face: `s3_archive_native.Producer` (producer.rs) and `ProduceError`, whose attributes
//! `code` (librdkafka's, as confluent-kafka's `KafkaError.code()`), `retriable`, `txn_requires_abort` and `fatal`
//! let the caller classify it. Every call that may wait on the network releases the GIL; the class is frozen and
//! shareable between threads (a transactional call may run under a watchdog thread).

use arrow_array::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{make_array, Array, ArrayRef, Int64Array};
use arrow_schema::DataType;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use crate::producer::{Failure, NativeProducer};
use crate::rows::{Bytes, Extra, Headers, Partitions, Rows, Stamps};

create_exception!(
    s3_archive_native,
    ProduceError,
    PyException,
    "A producer call failed; `code`, `retriable`, `txn_requires_abort` and `fatal` say how (the text says why)."
);

fn raise(py: Python<'_>, f: Failure) -> PyErr {
    let err = ProduceError::new_err(f.text);
    let v = err.value(py);
    let set = || -> PyResult<()> {
        v.setattr("code", f.code)?;
        v.setattr("retriable", f.retriable)?;
        v.setattr("txn_requires_abort", f.requires_abort)?;
        v.setattr("fatal", f.fatal)
    };
    match set() {
        Ok(()) => err,
        Err(e) => e,
    }
}

/// An array handed over through the Arrow PyCapsule interface (pyarrow's arrays implement it), without a copy.
pub(crate) fn import(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<ArrayRef> {
    if !obj.hasattr("__arrow_c_array__")? {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an Arrow array (an object with __arrow_c_array__, e.g. a pyarrow.Array); got {}",
            obj.get_type().name()?
        )));
    }
    let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) = obj.call_method0("__arrow_c_array__")?.extract()?;
    let bad = |c: &Bound<'_, PyCapsule>, want: &str| -> PyResult<bool> {
        Ok(c.name()?.map(|n| n.to_bytes() != want.as_bytes()).unwrap_or(true))
    };
    if bad(&schema, "arrow_schema")? || bad(&array, "arrow_array")? {
        return Err(PyValueError::new_err(format!("{what}: __arrow_c_array__ did not return Arrow capsules")));
    }
    // SAFETY: the capsules hold an exported schema and array (their names say so); the array is moved out of its
    // capsule (which then releases an empty one), the schema only read while its capsule lives.
    let data = unsafe {
        let ffi = std::ptr::replace(array.pointer() as *mut FFI_ArrowArray, FFI_ArrowArray::empty());
        from_ffi(ffi, &*(schema.pointer() as *const FFI_ArrowSchema))
    }
    .map_err(|e| PyValueError::new_err(format!("{what}: the Arrow array could not be imported: {e}")))?;
    Ok(make_array(data))
}

fn checked<T>(r: Result<T, String>) -> PyResult<T> {
    r.map_err(PyValueError::new_err)
}

/// A producer over librdkafka; `config` is the whole client configuration (key, value) as librdkafka takes it.
#[pyclass(name = "Producer", frozen)]
struct PyProducer {
    inner: NativeProducer,
}

#[pymethods]
impl PyProducer {
    #[new]
    fn new(py: Python<'_>, config: Vec<(String, String)>, servers: String) -> PyResult<Self> {
        NativeProducer::open(&config, servers).map(|inner| PyProducer { inner }).map_err(|f| raise(py, f))
    }

    /// Wait up to `timeout_s` until a broker of the cluster (not a bootstrap address) answers a metadata request for
    /// `topic`, so for a broker connection init_transactions can use; whether one answered.
    fn wait_connected(&self, py: Python<'_>, topic: String, timeout_s: f64) -> bool {
        py.detach(|| self.inner.wait_connected(&topic, timeout_s))
    }

    fn init_transactions(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        py.detach(|| self.inner.init_transactions(timeout_s)).map_err(|f| raise(py, f))
    }

    fn begin_transaction(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.begin_transaction()).map_err(|f| raise(py, f))
    }

    fn commit_transaction(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        py.detach(|| self.inner.commit_transaction(timeout_s)).map_err(|f| raise(py, f))
    }

    fn abort_transaction(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        py.detach(|| self.inner.abort_transaction(timeout_s)).map_err(|f| raise(py, f))
    }

    /// `offsets`: [(topic, partition, offset, metadata)] of consumer group `group_id`, committed with the transaction.
    fn send_offsets_to_transaction(&self, py: Python<'_>, offsets: Vec<(String, i32, i64, String)>, group_id: String,
                                   timeout_s: f64) -> PyResult<()> {
        py.detach(|| self.inner.send_offsets_to_transaction(&offsets, &group_id, timeout_s)).map_err(|f| raise(py, f))
    }

    /// Queue `values`' records to `topic` with no Python per record; the GIL is released while they are queued.
    /// `partitions`: an int (all records) or an int array (one per record); `keys`, `values`: binary arrays;
    /// `headers`: list<struct<key: string, value: binary>> (null: none); `timestamps`: int64 epoch ms or a
    /// timestamp array (null, 0 or negative: "now"); `extra_headers`: [(key, value)] added to every record, then
    /// (`offset_header`, the record's `offsets` entry as decimal text). `track`: `take_deliveries` reports the
    /// batch's first and last delivered offset per partition. Returns the batch's id (0 unless `track`).
    #[pyo3(signature = (topic, partitions, keys, values, headers=None, timestamps=None, extra_headers=None,
                        offset_header=None, offsets=None, track=false, queue_full_s=60.0))]
    #[allow(clippy::too_many_arguments)]
    fn produce_arrow(&self, py: Python<'_>, topic: String, partitions: &Bound<'_, PyAny>, keys: &Bound<'_, PyAny>,
                     values: &Bound<'_, PyAny>, headers: Option<&Bound<'_, PyAny>>,
                     timestamps: Option<&Bound<'_, PyAny>>, extra_headers: Option<Vec<(String, Option<Vec<u8>>)>>,
                     offset_header: Option<String>, offsets: Option<&Bound<'_, PyAny>>, track: bool,
                     queue_full_s: f64) -> PyResult<usize> {
        let partitions = match partitions.extract::<i32>() {
            Ok(p) => Partitions::One(p),
            Err(_) => checked(Partitions::each(import(partitions, "partitions")?))?,
        };
        let offset = match (offset_header, offsets) {
            (Some(name), Some(o)) => {
                let a = import(o, "offsets")?;
                if a.data_type() != &DataType::Int64 {
                    return Err(PyValueError::new_err(format!("offsets must be int64; got {}", a.data_type())));
                }
                Some((name, Int64Array::from(a.to_data())))
            }
            (None, None) => None,
            _ => return Err(PyValueError::new_err("offset_header and offsets go together")),
        };
        let rows = Rows {
            partitions,
            keys: checked(Bytes::of("keys", import(keys, "keys")?))?,
            values: checked(Bytes::of("values", import(values, "values")?))?,
            headers: headers.filter(|h| !h.is_none()).map(|h| import(h, "headers").and_then(|a| checked(Headers::of(a))))
                .transpose()?,
            stamps: timestamps.filter(|t| !t.is_none())
                .map(|t| import(t, "timestamps").and_then(|a| checked(Stamps::of(a)))).transpose()?,
            extra: Extra { constant: extra_headers.unwrap_or_default(), offset },
        };
        checked(rows.check())?;
        py.detach(|| self.inner.produce(&topic, &rows, track, queue_full_s)).map_err(|f| raise(py, f))
    }

    /// Serve delivery reports for up to `timeout_s`.
    #[pyo3(signature = (timeout_s=0.0))]
    fn poll(&self, py: Python<'_>, timeout_s: f64) {
        py.detach(|| self.inner.poll(timeout_s))
    }

    /// Deliver what is queued, up to `timeout_s`; how many records are still queued or in flight.
    fn flush(&self, py: Python<'_>, timeout_s: f64) -> PyResult<i32> {
        py.detach(|| self.inner.flush(timeout_s)).map_err(|f| raise(py, f))
    }

    /// Drop what is queued or in flight (no transaction commits them).
    fn purge(&self, py: Python<'_>) {
        py.detach(|| self.inner.purge())
    }

    /// librdkafka's count of what is outstanding: records queued or in flight, requests, unserved reports and events.
    fn in_flight(&self) -> i32 {
        self.inner.in_flight()
    }

    /// Delivery reports served since the last call: (delivered, failed, first error as (code, text) or None,
    /// [(batch id, partition, first offset, last offset, records)] of tracked batches).
    #[allow(clippy::type_complexity)]
    fn take_deliveries(&self) -> (u64, u64, Option<(i32, String)>, Vec<(usize, i32, i64, i64, u64)>) {
        let d = self.inner.take();
        let spans = d.tracked.into_iter().map(|(b, s)| (b, s.partition, s.first, s.last, s.count)).collect();
        (d.delivered, d.failed, d.first_error, spans)
    }

    /// The error that made the producer unusable (code, text), if one did (e.g. fenced).
    fn fatal_error(&self) -> Option<(i32, String)> {
        self.inner.fatal_error().map(|(c, t)| (c as i32, t))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProducer>()?;
    m.add("ProduceError", m.py().get_type::<ProduceError>())?;
    Ok(())
}
