//! A write + read-back verification load: rounds of pattern writes over a
//! region, spread over the queues, each read back and compared. Counts
//! client-visible errors and corrupt sectors instead of stopping at the first.

use std::time::{Duration, Instant};

use crate::client::Client;
use crate::ops::Op;
use crate::pattern::pattern;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub rounds: u64,
    pub writes: u64,
    pub reads: u64,
    /// Requests the client saw fail.
    pub errors: u64,
    /// 512-byte sectors read back different from what was written.
    pub corrupt_sectors: u64,
}

pub struct VerifyLoad {
    pub offset: u64,
    pub block: usize,
    pub blocks: usize,
    /// Requests in flight per batch (spread over the client's queues).
    pub depth: usize,
}

impl VerifyLoad {
    pub fn new(offset: u64, block: usize, blocks: usize) -> VerifyLoad {
        VerifyLoad {
            offset,
            block,
            blocks,
            depth: 16,
        }
    }

    /// What round `round` writes at block `i`.
    pub fn expected(&self, round: u64, i: usize) -> Vec<u8> {
        let off = self.offset + (i * self.block) as u64;
        pattern(round.wrapping_mul(7919).wrapping_add(1), off, self.block)
    }

    /// Runs rounds until `duration` has passed (at least one round).
    pub fn run(&self, client: &mut Client, duration: Duration) -> VerifyReport {
        let start = Instant::now();
        let mut report = VerifyReport::default();
        let queues = client.num_queues().max(1);
        loop {
            let round = report.rounds;
            let datas: Vec<Vec<u8>> = (0..self.blocks).map(|i| self.expected(round, i)).collect();
            for chunk in (0..self.blocks).collect::<Vec<_>>().chunks(self.depth) {
                let ops: Vec<(usize, Op)> = chunk
                    .iter()
                    .map(|&i| {
                        (
                            i % queues,
                            Op::Write {
                                offset: self.offset + (i * self.block) as u64,
                                data: &datas[i],
                            },
                        )
                    })
                    .collect();
                for r in client.batch(&ops) {
                    report.writes += 1;
                    if r.is_err() {
                        report.errors += 1;
                    }
                }
            }
            for chunk in (0..self.blocks).collect::<Vec<_>>().chunks(self.depth) {
                let ops: Vec<(usize, Op)> = chunk
                    .iter()
                    .map(|&i| {
                        (
                            (i + 1) % queues,
                            Op::Read {
                                offset: self.offset + (i * self.block) as u64,
                                len: self.block,
                            },
                        )
                    })
                    .collect();
                for (r, &i) in client.batch(&ops).into_iter().zip(chunk) {
                    report.reads += 1;
                    match r {
                        Ok(out) => {
                            let got = out.into_data();
                            report.corrupt_sectors +=
                                got.chunks(512)
                                    .zip(datas[i].chunks(512))
                                    .filter(|(a, b)| a != b)
                                    .count() as u64;
                        }
                        Err(_) => report.errors += 1,
                    }
                }
            }
            report.rounds += 1;
            if start.elapsed() >= duration {
                return report;
            }
        }
    }
}
