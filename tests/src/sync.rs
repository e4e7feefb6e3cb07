//! Synchronous helpers: one request (or a few in sequence), waiting for the result.

use crate::client::{Client, OpError};
use crate::ops::{Op, Output, BUF_ALIGN};

impl Client {
    /// The largest request the helpers below send: the device's `max-transfer` and
    /// half the buffer memory, whichever is smaller.
    pub fn max_request_len(&self) -> usize {
        let mem = self.mem_size() / 2 / BUF_ALIGN * BUF_ALIGN;
        match self.info().max_transfer as usize {
            0 => mem,
            max => (max / BUF_ALIGN * BUF_ALIGN).min(mem),
        }
    }

    /// Writes `data` in as many requests of at most [`Client::max_request_len`] as needed.
    pub fn write_all(&mut self, offset: u64, data: &[u8]) -> Result<(), OpError> {
        let step = self.max_request_len();
        for (i, chunk) in data.chunks(step).enumerate() {
            self.write(offset + (i * step) as u64, chunk)?;
        }
        Ok(())
    }

    /// Reads `len` bytes in as many requests of at most [`Client::max_request_len`] as needed.
    pub fn read_all(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, OpError> {
        let step = self.max_request_len();
        let mut out = Vec::with_capacity(len);
        let mut done = 0;
        while done < len {
            let n = step.min(len - done);
            out.extend(self.read(offset + done as u64, n)?);
            done += n;
        }
        Ok(out)
    }

    /// One request on `queue`.
    pub fn run_on(&mut self, queue: usize, op: Op) -> Result<Output, OpError> {
        self.batch(&[(queue, op)]).pop().expect("one result")
    }

    pub fn read(&mut self, offset: u64, len: usize) -> Result<Vec<u8>, OpError> {
        self.read_on(0, offset, len)
    }

    pub fn read_on(&mut self, queue: usize, offset: u64, len: usize) -> Result<Vec<u8>, OpError> {
        self.run_on(queue, Op::Read { offset, len })
            .map(Output::into_data)
    }

    pub fn readv(&mut self, offset: u64, lens: &[usize]) -> Result<Vec<u8>, OpError> {
        self.run_on(0, Op::Readv { offset, lens })
            .map(Output::into_data)
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), OpError> {
        self.write_on(0, offset, data)
    }

    pub fn write_on(&mut self, queue: usize, offset: u64, data: &[u8]) -> Result<(), OpError> {
        self.run_on(queue, Op::Write { offset, data }).map(drop)
    }

    pub fn writev(&mut self, offset: u64, segments: &[&[u8]]) -> Result<(), OpError> {
        self.run_on(0, Op::Writev { offset, segments }).map(drop)
    }

    pub fn flush(&mut self) -> Result<(), OpError> {
        self.run_on(0, Op::Flush).map(drop)
    }

    pub fn discard(&mut self, offset: u64, len: u64) -> Result<(), OpError> {
        self.run_on(0, Op::Discard { offset, len }).map(drop)
    }

    pub fn write_zeroes(&mut self, offset: u64, len: u64, unmap: bool) -> Result<(), OpError> {
        self.run_on(0, Op::WriteZeroes { offset, len, unmap })
            .map(drop)
    }
}
