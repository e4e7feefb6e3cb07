//! The Asymmetric Namespace Access log page (log identifier 0x0C).
//!
//! Layout: a 16-byte header (`chgcnt u64 @0`, `ngrps u16 @8`), then per ANA
//! group a 32-byte descriptor (`grpid u32 @0`, `nnsids u32 @4`,
//! `chgcnt u64 @8`, `state u8 @16` low nibble) followed by `nnsids` u32
//! namespace ids.

use mpath::AnaState;

pub const LOG_ANA: u8 = 0x0c;
const HEADER_LEN: usize = 16;
const DESC_LEN: usize = 32;

/// The ANA state codes of the specification.
pub fn state_from_code(code: u8) -> Option<AnaState> {
    match code & 0xf {
        0x1 => Some(AnaState::Optimized),
        0x2 => Some(AnaState::NonOptimized),
        0x3 => Some(AnaState::Inaccessible),
        0x4 => Some(AnaState::PersistentLoss),
        0xf => Some(AnaState::Change),
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaGroup {
    pub grpid: u32,
    pub state: Option<AnaState>,
    pub nsids: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaLog {
    pub change_count: u64,
    pub groups: Vec<AnaGroup>,
}

impl AnaLog {
    /// Parses as many descriptors as `b` holds completely.
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < HEADER_LEN {
            return Err(format!("ANA log page is {} bytes", b.len()));
        }
        let change_count = u64::from_le_bytes(b[0..8].try_into().unwrap_or_default());
        let ngrps = u16::from_le_bytes([b[8], b[9]]);
        let mut groups = Vec::with_capacity(usize::from(ngrps));
        let mut off = HEADER_LEN;
        for _ in 0..ngrps {
            if off + DESC_LEN > b.len() {
                return Err(format!(
                    "ANA log page truncated: {ngrps} groups do not fit in {} bytes",
                    b.len()
                ));
            }
            let d = &b[off..off + DESC_LEN];
            let grpid = u32::from_le_bytes(d[0..4].try_into().unwrap_or_default());
            let nnsids = u32::from_le_bytes(d[4..8].try_into().unwrap_or_default()) as usize;
            let state = state_from_code(d[16]);
            off += DESC_LEN;
            let end = nnsids
                .checked_mul(4)
                .and_then(|n| off.checked_add(n))
                .filter(|&e| e <= b.len())
                .ok_or_else(|| {
                    format!("ANA group {grpid}: {nnsids} namespace ids overrun the page")
                })?;
            let nsids = b[off..end]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect();
            off = end;
            groups.push(AnaGroup {
                grpid,
                state,
                nsids,
            });
        }
        Ok(Self {
            change_count,
            groups,
        })
    }

    /// The state of ANA group `grpid` (the namespace's ANAGRPID), else the
    /// state of the group listing `nsid`.
    pub fn state_of(&self, grpid: u32, nsid: u32) -> Option<AnaState> {
        self.groups
            .iter()
            .find(|g| grpid != 0 && g.grpid == grpid)
            .or_else(|| self.groups.iter().find(|g| g.nsids.contains(&nsid)))
            .and_then(|g| g.state)
    }

    /// Bytes to read for a controller with `nanagrpid` groups and `nn` namespaces.
    pub fn size_for(nanagrpid: u32, nn: u32) -> usize {
        let n =
            HEADER_LEN as u64 + u64::from(nanagrpid.max(1)) * DESC_LEN as u64 + u64::from(nn) * 4;
        // Bounded so that a controller claiming 2^32 namespaces cannot make us allocate gigabytes.
        (n.min(1 << 20) as usize).next_multiple_of(4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(groups: &[(u32, u8, &[u32])]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&7u64.to_le_bytes());
        b[8..10].copy_from_slice(&(groups.len() as u16).to_le_bytes());
        for (grpid, state, nsids) in groups {
            let mut d = [0u8; DESC_LEN];
            d[0..4].copy_from_slice(&grpid.to_le_bytes());
            d[4..8].copy_from_slice(&(nsids.len() as u32).to_le_bytes());
            d[16] = *state;
            b.extend_from_slice(&d);
            for n in *nsids {
                b.extend_from_slice(&n.to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn groups_and_states() {
        let b = log(&[
            (1, 0x1, &[1, 2]),
            (2, 0x2, &[3]),
            (3, 0xf, &[]),
            (4, 0x3, &[5]),
        ]);
        let l = AnaLog::parse(&b).unwrap();
        assert_eq!(l.change_count, 7);
        assert_eq!(l.groups.len(), 4);
        assert_eq!(l.groups[0].nsids, vec![1, 2]);
        assert_eq!(l.state_of(1, 1), Some(AnaState::Optimized));
        assert_eq!(l.state_of(2, 3), Some(AnaState::NonOptimized));
        assert_eq!(l.state_of(3, 9), Some(AnaState::Change));
        assert_eq!(l.state_of(4, 5), Some(AnaState::Inaccessible));
        // No group id known: found through the namespace list.
        assert_eq!(l.state_of(0, 3), Some(AnaState::NonOptimized));
        assert_eq!(l.state_of(9, 9), None);
        assert_eq!(state_from_code(0x4), Some(AnaState::PersistentLoss));
        assert_eq!(state_from_code(0x5), None);
    }

    #[test]
    fn truncated_pages_are_errors() {
        let b = log(&[(1, 0x1, &[1, 2])]);
        assert!(AnaLog::parse(&b[..HEADER_LEN + 8]).is_err());
        assert!(AnaLog::parse(&b[..b.len() - 2]).is_err());
        assert!(AnaLog::parse(&b[..4]).is_err());
        // Trailing zeroes (a page read larger than needed) are fine.
        let mut padded = b.clone();
        padded.resize(4096, 0);
        assert_eq!(AnaLog::parse(&padded).unwrap().groups.len(), 1);
    }

    #[test]
    fn read_size() {
        assert_eq!(AnaLog::size_for(1, 1), 16 + 32 + 4);
        assert_eq!(AnaLog::size_for(0, 0), 48);
        assert_eq!(AnaLog::size_for(u32::MAX, u32::MAX), 1 << 20);
    }
}
