//! A bounded single-producer queue that allocates as it fills.
//!
//! `std::sync::mpsc::sync_channel(n)` allocates and initialises all `n`
//! slots up front: for the file-access queue (4096 captures) and the
//! refused-call queue (1024) that was about 1 MiB of resident memory per
//! session, idle or not. This one is an unbounded channel (allocated in
//! small blocks as messages arrive) with a count that refuses a message
//! beyond the bound: the same contract (never waits, full means lost), the
//! memory of what is actually queued.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// A queue of at most `cap` messages.
pub(crate) fn bounded<T>(cap: usize) -> (QueueTx<T>, QueueRx<T>) {
    let (tx, rx) = channel();
    let len = Arc::new(AtomicUsize::new(0));
    (
        QueueTx {
            tx,
            len: len.clone(),
            cap,
        },
        QueueRx { rx, len },
    )
}

pub(crate) struct QueueTx<T> {
    tx: Sender<T>,
    len: Arc<AtomicUsize>,
    cap: usize,
}

impl<T> QueueTx<T> {
    /// Queues `v` unless `cap` messages are waiting; never blocks.
    pub(crate) fn try_send(&self, v: T) -> Result<(), TrySendError<T>> {
        if self.len.fetch_add(1, Ordering::AcqRel) >= self.cap {
            self.len.fetch_sub(1, Ordering::AcqRel);
            return Err(TrySendError::Full(v));
        }
        self.tx.send(v).map_err(|e| {
            self.len.fetch_sub(1, Ordering::AcqRel);
            TrySendError::Disconnected(e.0)
        })
    }
}

pub(crate) struct QueueRx<T> {
    rx: Receiver<T>,
    len: Arc<AtomicUsize>,
}

impl<T> QueueRx<T> {
    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        let v = self.rx.try_recv()?;
        self.len.fetch_sub(1, Ordering::AcqRel);
        Ok(v)
    }

    pub(crate) fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let v = self.rx.recv_timeout(timeout)?;
        self.len.fetch_sub(1, Ordering::AcqRel);
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_means_refused_and_taking_makes_room() {
        let (tx, rx) = bounded(2);
        assert!(tx.try_send(1).is_ok());
        assert!(tx.try_send(2).is_ok());
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        assert_eq!(rx.try_recv(), Ok(1));
        assert!(tx.try_send(4).is_ok());
        assert_eq!(rx.try_recv(), Ok(2));
        assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Ok(4));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        drop(tx);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        let (tx, rx) = bounded::<u8>(1);
        drop(rx);
        assert!(matches!(tx.try_send(5), Err(TrySendError::Disconnected(5))));
        // A refused send left the count as it was.
        assert!(matches!(tx.try_send(6), Err(TrySendError::Disconnected(6))));
    }
}
