//! The `write` operation: several requests loadgen counts as one — CREATE a new file, OPEN it
//! to write (and to read, with `--read-back`), WRITE `--size` bytes in pieces of at most
//! `MAX_IO`, with `--read-back` READ them back and compare, and RELEASE. Its latency is the
//! whole sequence's. The bytes come from a seed per file, piece by piece, so a lane holds one
//! piece at a time whatever `--size` is, and a piece the server put at the wrong offset or in
//! the wrong file reads back different.

use mds_client::Handle;
use mds_client::resilient::{Answer, Gone, ResilientConn};
use mds_proto::{Attr, Body, Errno, MAX_IO, Op, OpenFlags};

use crate::workload::Rng;

/// What each `write` puts in its file.
#[derive(Clone, Copy, Debug)]
pub(super) struct FileWork {
    /// Bytes per file (`--size`).
    pub(super) size: u64,
    /// Read every file back and check it (`--read-back`).
    pub(super) read_back: bool,
}

/// How one `write` went.
#[derive(Debug, Default)]
pub(super) struct WriteOutcome {
    /// The new file's attributes once its CREATE succeeded, whatever came after: the file
    /// exists, for the ack log and the working set.
    pub(super) created: Option<Attr>,
    /// The first error any of its requests was answered with.
    pub(super) error: Option<Errno>,
    /// Some request of it was resent after a reconnect.
    pub(super) resent: bool,
    pub(super) bytes_written: u64,
    pub(super) bytes_read: u64,
    /// What read back differed from what was written, if anything did (the file's size
    /// after the last write among it).
    pub(super) mismatch: Option<String>,
}

impl WriteOutcome {
    /// Takes in one answer: its body if it succeeded, its errno kept otherwise.
    fn take(&mut self, answer: Answer) -> Option<Body> {
        self.resent |= answer.resent;
        match answer.reply.result {
            Ok(body) => Some(body),
            Err(errno) => {
                self.error.get_or_insert(errno);
                None
            }
        }
    }

    /// A body of the wrong kind: the server broke the protocol.
    fn unexpected(&mut self) {
        self.error.get_or_insert(Errno::EPROTO);
    }
}

/// The bytes of piece `index` (of `len` bytes) of the file made with `seed`.
pub(super) fn piece(seed: u64, index: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0xA24B_AED4_963E_E407));
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        bytes.extend_from_slice(&rng.next().to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// The pieces of a file of `size` bytes: (index, offset, length).
fn pieces(size: u64) -> impl Iterator<Item = (u64, u64, usize)> {
    let step = MAX_IO as u64;
    (0..size.div_ceil(step)).map(move |index| {
        let offset = index * step;
        (index, offset, (size - offset).min(step) as usize)
    })
}

/// One `write`: `create` (the lane's CREATE of a new name), then the file's OPEN, WRITEs,
/// READs and RELEASE. The handle is released whatever the writes and reads came to. `Err`
/// only when the connection is gone for good.
pub(super) async fn write_file(
    conn: &ResilientConn,
    create: Op,
    work: FileWork,
    seed: u64,
) -> Result<WriteOutcome, Gone> {
    let mut done = WriteOutcome::default();
    let created = match done.take(conn.call(create).await?) {
        Some(Body::Attr(attr)) => attr,
        Some(_) => {
            done.unexpected();
            return Ok(done);
        }
        None => return Ok(done),
    };
    let ino = created.ino;
    done.created = Some(created);
    // A new file is empty: no truncate, which would be one more change to commit.
    let flags = OpenFlags {
        read: work.read_back,
        write: true,
        ..OpenFlags::default()
    };
    let (handle, answer) = conn.open(ino, flags).await?;
    match done.take(answer) {
        Some(Body::Attr(_)) => {}
        Some(_) => {
            done.unexpected();
            return Ok(done);
        }
        None => return Ok(done),
    }
    fill(conn, handle, work, seed, &mut done).await?;
    if done.error.is_none() && done.mismatch.is_none() && work.read_back {
        check(conn, handle, work, seed, &mut done).await?;
    }
    let released = conn.release(handle).await?;
    if let Some(body) = done.take(released)
        && body != Body::Done
    {
        done.unexpected();
    }
    Ok(done)
}

/// The WRITEs, one piece after the other; the file's size after the last must be `size`.
async fn fill(
    conn: &ResilientConn,
    handle: Handle,
    work: FileWork,
    seed: u64,
    done: &mut WriteOutcome,
) -> Result<(), Gone> {
    for (index, offset, len) in pieces(work.size) {
        let op = handle.write_op(offset, piece(seed, index, len));
        match done.take(conn.call_on(handle, op).await?) {
            Some(Body::Attr(attr)) => {
                done.bytes_written += len as u64;
                let end = offset + len as u64;
                if end == work.size && attr.size != work.size {
                    done.mismatch = Some(format!(
                        "inode {}: size {} after writing {} bytes",
                        handle.ino(),
                        attr.size,
                        work.size
                    ));
                }
            }
            Some(_) => {
                done.unexpected();
                return Ok(());
            }
            None => return Ok(()),
        }
    }
    Ok(())
}

/// The READs, one piece after the other, each compared with what was written there.
async fn check(
    conn: &ResilientConn,
    handle: Handle,
    work: FileWork,
    seed: u64,
    done: &mut WriteOutcome,
) -> Result<(), Gone> {
    for (index, offset, len) in pieces(work.size) {
        let op = handle.read_op(offset, len as u32);
        match done.take(conn.call_on(handle, op).await?) {
            Some(Body::Data(data)) => {
                done.bytes_read += data.0.len() as u64;
                if data.0 != piece(seed, index, len) {
                    let differs = data
                        .0
                        .iter()
                        .zip(piece(seed, index, len))
                        .position(|(got, wrote)| *got != wrote)
                        .unwrap_or(data.0.len().min(len));
                    done.mismatch = Some(format!(
                        "inode {}: {} bytes read at {offset} (of {len} asked) differ from \
                         what was written from byte {}",
                        handle.ino(),
                        data.0.len(),
                        offset + differs as u64
                    ));
                    return Ok(());
                }
            }
            Some(_) => {
                done.unexpected();
                return Ok(());
            }
            None => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_cut_into_max_io_pieces_the_last_one_shorter() {
        let step = MAX_IO as u64;
        assert_eq!(pieces(0).count(), 0);
        assert_eq!(pieces(4096).collect::<Vec<_>>(), [(0, 0, 4096)]);
        assert_eq!(pieces(step).collect::<Vec<_>>(), [(0, 0, MAX_IO)]);
        assert_eq!(
            pieces(2 * step + 1).collect::<Vec<_>>(),
            [(0, 0, MAX_IO), (1, step, MAX_IO), (2, 2 * step, 1)]
        );
    }

    #[test]
    fn pieces_are_reproducible_and_differ_by_file_and_place() {
        assert_eq!(piece(7, 0, 4096), piece(7, 0, 4096));
        assert_eq!(piece(7, 0, 4096).len(), 4096);
        assert_eq!(
            piece(7, 0, 5),
            piece(7, 0, 4096)[..5],
            "a shorter piece is a prefix"
        );
        assert_ne!(piece(7, 0, 4096), piece(8, 0, 4096), "another file");
        assert_ne!(piece(7, 0, 4096), piece(7, 1, 4096), "another offset");
        assert!(piece(7, 0, 0).is_empty());
    }
}
