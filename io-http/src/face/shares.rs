//! Counted shares of a face's bounded resources — its open connections and its requests in
//! flight — with a cap for the whole face and a smaller cap per peer.
//!
//! The per-peer cap is what keeps one peer's sockets to its own share: a peer that opens slow
//! connection after connection, or drips the bodies of as many requests as it likes, reaches
//! its own cap long before the face's, and every other peer is still admitted. The face's cap
//! sits above the per-peer ones, so the face's total work and file descriptors stay bounded
//! whoever asks (many peers together degrade the face, never the process).
//!
//! A [`Share`] gives its unit back when dropped, so a share can ride along with whatever holds
//! the resource (a connection's task, a reply's body) and is returned however that ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::budget::lock;
use super::peer::PeerKey;

/// Why a share was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareRefusal {
    /// The peer already holds its own cap.
    Peer,
    /// The face as a whole holds its cap.
    Face,
}

/// The caps of one resource: the face's total and each peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareCaps {
    /// Units held at once across every peer.
    pub face: usize,
    /// Units held at once by one peer; `None` when the face has no per-peer identity for this
    /// resource (the loopback face, or connections arriving through a trusted proxy).
    pub peer: Option<usize>,
}

#[derive(Debug)]
struct Held {
    caps: ShareCaps,
    total: usize,
    /// Only peers that hold something: an entry goes when its count falls to zero, so the map
    /// never holds more entries than the face cap.
    by_peer: HashMap<PeerKey, usize>,
}

/// The shares of one resource on one face. Cheap to clone: clones count the same units.
#[derive(Debug, Clone)]
pub struct Shares {
    held: Arc<Mutex<Held>>,
}

impl Shares {
    /// Nothing held yet, under `caps` (a cap of 0 is read as 1: a face that admits nothing is
    /// a configuration mistake, not a policy).
    pub fn new(caps: ShareCaps) -> Shares {
        let caps = ShareCaps {
            face: caps.face.max(1),
            peer: caps.peer.map(|peer| peer.max(1)),
        };
        Shares {
            held: Arc::new(Mutex::new(Held {
                caps,
                total: 0,
                by_peer: HashMap::new(),
            })),
        }
    }

    /// Takes one unit for `peer`: refused when the peer holds its cap (checked first, so a
    /// greedy peer is told it is the one over its share) or the face holds its cap.
    pub fn take(&self, peer: &PeerKey) -> Result<Share, ShareRefusal> {
        let mut held = lock(&self.held);
        let caps = held.caps;
        let mine = held.by_peer.get(peer).copied().unwrap_or(0);
        if caps.peer.is_some_and(|cap| mine >= cap) {
            return Err(ShareRefusal::Peer);
        }
        if held.total >= caps.face {
            return Err(ShareRefusal::Face);
        }
        held.total += 1;
        held.by_peer.insert(peer.clone(), mine + 1);
        Ok(Share {
            held: Arc::clone(&self.held),
            peer: peer.clone(),
        })
    }

    /// How many units are held, in all and by `peer`.
    pub fn held(&self, peer: &PeerKey) -> (usize, usize) {
        let held = lock(&self.held);
        (held.total, held.by_peer.get(peer).copied().unwrap_or(0))
    }
}

/// One unit of a [`Shares`], given back on drop.
#[derive(Debug)]
pub struct Share {
    held: Arc<Mutex<Held>>,
    peer: PeerKey,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        held.total = held.total.saturating_sub(1);
        if let Some(count) = held.by_peer.get_mut(&self.peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.by_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str) -> PeerKey {
        PeerKey::new(name)
    }

    #[test]
    fn one_peer_exhausts_only_its_own_share() {
        let shares = Shares::new(ShareCaps {
            face: 4,
            peer: Some(2),
        });
        let a1 = shares.take(&peer("a")).unwrap();
        let _a2 = shares.take(&peer("a")).unwrap();
        assert_eq!(shares.take(&peer("a")).unwrap_err(), ShareRefusal::Peer);
        let _b1 = shares.take(&peer("b")).unwrap();
        let _b2 = shares.take(&peer("b")).unwrap();
        // The face is full: a third peer is told so, and the greedy peer is still told it is
        // over its own share.
        assert_eq!(shares.take(&peer("c")).unwrap_err(), ShareRefusal::Face);
        assert_eq!(shares.take(&peer("a")).unwrap_err(), ShareRefusal::Peer);
        drop(a1);
        assert_eq!(shares.held(&peer("a")), (3, 1));
        let _c1 = shares.take(&peer("c")).unwrap();
        assert_eq!(shares.held(&peer("c")), (4, 1));
    }

    #[test]
    fn without_a_peer_cap_only_the_face_cap_holds_and_released_peers_leave_no_entry() {
        let shares = Shares::new(ShareCaps {
            face: 2,
            peer: None,
        });
        let a1 = shares.take(&peer("a")).unwrap();
        let a2 = shares.take(&peer("a")).unwrap();
        assert_eq!(shares.take(&peer("b")).unwrap_err(), ShareRefusal::Face);
        drop((a1, a2));
        assert_eq!(shares.held(&peer("a")), (0, 0));
        assert!(lock(&shares.held).by_peer.is_empty());
    }

    #[test]
    fn zero_caps_admit_one() {
        let shares = Shares::new(ShareCaps {
            face: 0,
            peer: Some(0),
        });
        let _one = shares.take(&peer("a")).unwrap();
        assert_eq!(shares.take(&peer("a")).unwrap_err(), ShareRefusal::Peer);
    }
}
