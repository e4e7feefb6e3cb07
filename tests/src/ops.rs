//! Requests in batches: submit many (on any queues), wait for all, return each result.
//! The synchronous helpers (`read`, `write`, ...) are one-request batches.

use crate::client::{Client, OpError};
use blkio::{iovec, Completion, ReqFlags};
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

/// Buffers start at multiples of this in the memory region (as Linux guests align them).
pub(crate) const BUF_ALIGN: usize = 512;

/// One request.
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    Read {
        offset: u64,
        len: usize,
    },
    /// A read scattered into buffers of these lengths.
    Readv {
        offset: u64,
        lens: &'a [usize],
    },
    Write {
        offset: u64,
        data: &'a [u8],
    },
    /// A write gathered from these buffers.
    Writev {
        offset: u64,
        segments: &'a [&'a [u8]],
    },
    Flush,
    Discard {
        offset: u64,
        len: u64,
    },
    /// `unmap: false` sends BLKIO_REQ_NO_UNMAP.
    WriteZeroes {
        offset: u64,
        len: u64,
        unmap: bool,
    },
}

/// What a successful request returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Done,
    /// The bytes read (segments concatenated for `Readv`).
    Data(Vec<u8>),
}

impl Output {
    /// The data of a read; panics for other requests.
    pub fn into_data(self) -> Vec<u8> {
        match self {
            Output::Data(data) => data,
            Output::Done => panic!("request returned no data"),
        }
    }
}

/// Where one request's buffers lie in the memory region.
struct Placed {
    /// (memory offset, length) of each buffer.
    bufs: Vec<(usize, usize)>,
    iov: Vec<iovec>,
}

impl Client {
    /// Submits every `(queue, op)`, kicks all queues, waits for all completions and
    /// returns the results in order. Panics if the buffers do not fit the memory
    /// region or if the server does not complete them within the client's timeout.
    pub fn batch(&mut self, ops: &[(usize, Op)]) -> Vec<Result<Output, OpError>> {
        // The iovec arrays must stay alive until completion: blkio keeps pointers to
        // them while a request waits in its backlog.
        let placed = self.place(ops);
        let mut pending = vec![0usize; self.queues.len()];
        for (i, ((q, op), p)) in ops.iter().zip(&placed).enumerate() {
            self.submit(*q, op, p, i);
            pending[*q] += 1;
        }
        let mut results: Vec<Option<Result<(), OpError>>> = vec![None; ops.len()];
        self.wait_all(&mut pending, &mut results);
        ops.iter()
            .zip(&placed)
            .zip(results)
            .map(|((op, p), r)| {
                r.expect("every request completed")?;
                Ok(match op.1 {
                    Op::Read { .. } | Op::Readv { .. } => {
                        let mut data = Vec::new();
                        for &(off, len) in &p.bufs {
                            data.extend(self.memory.copy_out(off, len));
                        }
                        Output::Data(data)
                    }
                    _ => Output::Done,
                })
            })
            .collect()
    }

    /// Like [`Client::batch`] for requests whose data is not wanted, and
    /// says when each completed, counted from the submission (to within a
    /// millisecond or so: the queues are polled, not waited on).
    pub fn batch_timed(&mut self, ops: &[(usize, Op)]) -> Vec<(Result<(), OpError>, Duration)> {
        let placed = self.place(ops);
        let start = Instant::now();
        let mut pending = vec![0usize; self.queues.len()];
        for (i, ((q, op), p)) in ops.iter().zip(&placed).enumerate() {
            self.submit(*q, op, p, i);
            pending[*q] += 1;
        }
        let mut results: Vec<Option<(Result<(), OpError>, Duration)>> = vec![None; ops.len()];
        let mut completions: Vec<MaybeUninit<Completion>> = (0..ops.len().max(1))
            .map(|_| MaybeUninit::uninit())
            .collect();
        while pending.iter().any(|&p| p > 0) {
            let mut got = 0;
            for (q, p) in pending.iter_mut().enumerate() {
                // min 0: submits (kicks) and returns what has completed.
                let n = self.queues[q]
                    .do_io(&mut completions, 0, None, None)
                    .unwrap_or_else(|e| panic!("queue {q}: {e}"));
                for c in &completions[..n] {
                    // SAFETY: do_io initialised the first `n` completions.
                    let c = unsafe { c.assume_init_read() };
                    results[c.user_data] = Some((completion_result(&c), start.elapsed()));
                }
                *p -= n;
                got += n;
            }
            if got == 0 {
                assert!(
                    start.elapsed() < self.timeout,
                    "requests not completed within {:?}",
                    self.timeout
                );
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        drop(placed);
        results
            .into_iter()
            .map(|r| r.expect("every request completed"))
            .collect()
    }

    /// Lays out the buffers of all requests, copying write data in. A buffer longer
    /// than the device's `size_max` becomes several segments, as a guest would send it.
    fn place(&self, ops: &[(usize, Op)]) -> Vec<Placed> {
        let size_max = self.info().max_segment_len as usize;
        let mut next = 0usize;
        let mut alloc = |len: usize| {
            let off = next;
            next = (off + len).next_multiple_of(BUF_ALIGN);
            self.memory.ptr(off, len); // bounds check
            off
        };
        ops.iter()
            .map(|(q, op)| {
                assert!(*q < self.queues.len(), "queue {q} not started");
                let lens: Vec<usize> = match op {
                    Op::Read { len, .. } => vec![*len],
                    Op::Readv { lens, .. } => lens.to_vec(),
                    Op::Write { data, .. } => vec![data.len()],
                    Op::Writev { segments, .. } => segments.iter().map(|s| s.len()).collect(),
                    _ => Vec::new(),
                };
                let bufs: Vec<(usize, usize)> = split_segments(&lens, size_max)
                    .into_iter()
                    .map(|len| (alloc(len), len))
                    .collect();
                match op {
                    Op::Write { data, .. } => self.copy_in_segments(&bufs, &[data]),
                    Op::Writev { segments, .. } => self.copy_in_segments(&bufs, segments),
                    // Poison read buffers so that bytes the server skipped show up.
                    Op::Read { .. } | Op::Readv { .. } => {
                        for &(off, len) in &bufs {
                            self.memory.fill(off, len, 0xa5);
                        }
                    }
                    _ => {}
                }
                let iov = bufs
                    .iter()
                    .map(|&(off, len)| iovec {
                        iov_base: self.memory.ptr(off, len).cast(),
                        iov_len: len,
                    })
                    .collect();
                Placed { bufs, iov }
            })
            .collect()
    }

    /// Copies the concatenation of `data` into the buffers `bufs`, in order.
    fn copy_in_segments(&self, bufs: &[(usize, usize)], data: &[&[u8]]) {
        let all: Vec<u8> = data.concat();
        let mut at = 0;
        for &(off, len) in bufs {
            self.memory.copy_in(off, &all[at..at + len]);
            at += len;
        }
    }

    fn submit(&mut self, q: usize, op: &Op, p: &Placed, tag: usize) {
        let queue = &mut self.queues[q];
        let none = ReqFlags::empty();
        match *op {
            Op::Read { offset, len } => {
                queue.read(offset, p.iov[0].iov_base.cast(), len, tag, none)
            }
            Op::Write { offset, data } => {
                queue.write(offset, p.iov[0].iov_base.cast(), data.len(), tag, none)
            }
            Op::Readv { offset, .. } => {
                queue.readv(offset, p.iov.as_ptr(), p.iov.len() as u32, tag, none)
            }
            Op::Writev { offset, .. } => {
                queue.writev(offset, p.iov.as_ptr(), p.iov.len() as u32, tag, none)
            }
            Op::Flush => queue.flush(tag, none),
            Op::Discard { offset, len } => queue.discard(offset, len, tag, none),
            Op::WriteZeroes { offset, len, unmap } => {
                let flags = if unmap { none } else { ReqFlags::NO_UNMAP };
                queue.write_zeroes(offset, len, tag, flags)
            }
        }
    }

    /// Kicks every queue first (blkio only notifies the device inside `do_io`), so that
    /// all queues work in parallel, then reaps each queue's completions.
    fn wait_all(&mut self, pending: &mut [usize], results: &mut [Option<Result<(), OpError>>]) {
        let deadline = Instant::now() + self.timeout;
        let mut completions: Vec<MaybeUninit<Completion>> = (0..results.len().max(1))
            .map(|_| MaybeUninit::uninit())
            .collect();
        for (q, p) in pending.iter_mut().enumerate() {
            *p -= self.reap(q, &mut completions, 0, deadline, results);
        }
        for (q, p) in pending.iter_mut().enumerate() {
            while *p > 0 {
                *p -= self.reap(q, &mut completions, *p, deadline, results);
            }
        }
    }

    fn reap(
        &mut self,
        q: usize,
        completions: &mut [MaybeUninit<Completion>],
        min: usize,
        deadline: Instant,
        results: &mut [Option<Result<(), OpError>>],
    ) -> usize {
        let mut timeout = deadline.saturating_duration_since(Instant::now());
        let n = match self.queues[q].do_io(completions, min, Some(&mut timeout), None) {
            Ok(n) => n,
            Err(e) => panic!(
                "queue {q}: waiting for {min} completion(s) failed after {:?}: {e} ({})",
                self.timeout,
                e.errno()
            ),
        };
        for c in &completions[..n] {
            // SAFETY: do_io initialised the first `n` completions.
            let c = unsafe { c.assume_init_read() };
            results[c.user_data] = Some(completion_result(&c));
        }
        n
    }

    /// Submits the requests and kicks the queues, then disconnects (closes the socket)
    /// without waiting for them: a VMM that dies with I/O in flight.
    pub fn abandon(mut self, ops: &[(usize, Op)]) {
        let placed = self.place(ops);
        for (i, ((q, op), p)) in ops.iter().zip(&placed).enumerate() {
            self.submit(*q, op, p, i);
        }
        let mut none: [MaybeUninit<Completion>; 0] = [];
        for queue in &mut self.queues {
            let _ = queue.do_io(&mut none, 0, None, None);
        }
        drop(self);
        drop(placed);
    }
}

/// Splits each length into pieces of at most `size_max` bytes (0: no limit).
fn split_segments(lens: &[usize], size_max: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for &len in lens {
        if size_max == 0 || len <= size_max {
            out.push(len);
        } else {
            let mut left = len;
            while left > 0 {
                out.push(left.min(size_max));
                left -= left.min(size_max);
            }
        }
    }
    out
}

/// `ret` is 0 or a negative errno; `error_msg` is null for device completions.
pub(crate) fn completion_result(c: &Completion) -> Result<(), OpError> {
    if c.ret >= 0 {
        return Ok(());
    }
    let message = (!c.error_msg.is_null()).then(|| {
        // SAFETY: blkio sets error_msg to null or to a 'static NUL-terminated string.
        unsafe { CStr::from_ptr(c.error_msg) }
            .to_string_lossy()
            .into_owned()
    });
    Err(OpError {
        errno: -c.ret,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::split_segments;

    #[test]
    fn long_buffers_become_several_segments() {
        assert_eq!(
            split_segments(&[100, 2500, 0], 1000),
            [100, 1000, 1000, 500, 0]
        );
        assert_eq!(split_segments(&[5000], 0), [5000]);
    }
}
