//! Open files as the client keeps them: the handle numbers a session chooses (the protocol
//! leaves them to the client, unique among one identity's open handles, so a counter per
//! [`crate::Session`] does), what each opens, and the server start it is open on. A server
//! that restarts forgets its handles; the client reopens every one it holds after its replays
//! ([`crate::Client`] does, at connect), and a handle the new start refuses to take back is
//! dead: every later use of it answers the errno the reopen got, and its release just forgets
//! it.

use std::collections::BTreeMap;

use mds_proto::{Data, Errno, Op, OpenFlags, SetAttr};

/// An open file: the number the session chose for it, the inode it opens and how. Cheap to
/// copy; READ, WRITE, SETATTR and RELEASE name it, and it carries the inode they need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    id: u64,
    ino: u64,
    flags: OpenFlags,
}

impl Handle {
    /// The number on the wire.
    pub fn id(self) -> u64 {
        self.id
    }

    /// The inode it opens.
    pub fn ino(self) -> u64 {
        self.ino
    }

    /// How it was opened.
    pub fn flags(self) -> OpenFlags {
        self.flags
    }

    /// The OPEN that opens it first.
    pub fn open_op(self) -> Op {
        Op::Open {
            ino: self.ino,
            handle: self.id,
            flags: self.flags,
            reopen: false,
        }
    }

    /// The OPEN that takes it back after a server restart: the same access, never a truncate
    /// (the file was cut when it was first opened; cutting it again would lose what was
    /// written through it since).
    pub fn reopen_op(self) -> Op {
        Op::Open {
            ino: self.ino,
            handle: self.id,
            flags: OpenFlags {
                truncate: false,
                ..self.flags
            },
            reopen: true,
        }
    }

    /// READ of up to `len` bytes at `offset`.
    pub fn read_op(self, offset: u64, len: u32) -> Op {
        Op::Read {
            ino: self.ino,
            handle: self.id,
            offset,
            len,
        }
    }

    /// WRITE of `data` at `offset`; through an append handle at the end of the file, sent
    /// as offset `u64::MAX` so that a replay after a restart (which runs without the handle)
    /// appends too.
    pub fn write_op(self, offset: u64, data: Vec<u8>) -> Op {
        Op::Write {
            ino: self.ino,
            handle: self.id,
            offset: if self.flags().append {
                u64::MAX
            } else {
                offset
            },
            data: Data(data),
        }
    }

    /// SETATTR of the size through this handle (`ftruncate(2)`).
    pub fn truncate_op(self, size: u64) -> Op {
        Op::Setattr {
            ino: self.ino,
            attr: SetAttr {
                size: Some(size),
                handle: Some(self.id),
                ..SetAttr::default()
            },
        }
    }

    pub fn release_op(self) -> Op {
        Op::Release { handle: self.id }
    }
}

/// One session's handles: the next number, and each handle it holds open.
#[derive(Debug)]
pub(crate) struct Handles {
    /// The next number to hand out; numbers start at 1 and are never used twice.
    next: u64,
    /// Held open, by number: released ones are forgotten.
    held: BTreeMap<u64, Held>,
}

#[derive(Debug)]
struct Held {
    handle: Handle,
    /// The server start that has it open; a connect to any other start reopens it.
    server_boot: u64,
    /// Its reopen was refused: what every later use of it answers.
    dead: Option<Errno>,
}

impl Handles {
    pub(crate) fn new() -> Handles {
        Handles {
            next: 1,
            held: BTreeMap::new(),
        }
    }

    /// A handle for `ino` with a number no other handle of the session has had. Not held
    /// until the server has opened it ([`Handles::opened`]).
    pub(crate) fn draw(&mut self, ino: u64, flags: OpenFlags) -> Handle {
        let id = self.next;
        self.next += 1;
        Handle { id, ino, flags }
    }

    /// The server start `server_boot` opened `handle`.
    pub(crate) fn opened(&mut self, handle: Handle, server_boot: u64) {
        self.held.insert(
            handle.id,
            Held {
                handle,
                server_boot,
                dead: None,
            },
        );
    }

    /// Released (or given up): no reconnect reopens it.
    pub(crate) fn forget(&mut self, handle: Handle) {
        self.held.remove(&handle.id);
    }

    /// The errno a dead handle answers; `None` for one that is alive, or not held (the
    /// server says what it makes of that).
    pub(crate) fn dead(&self, handle: Handle) -> Option<Errno> {
        self.held.get(&handle.id).and_then(|h| h.dead)
    }

    /// The live handles no open on `server_boot` backs, in number order: after a restart
    /// every one, and after a connect whose reopens were cut off, those not answered.
    pub(crate) fn to_reopen(&self, server_boot: u64) -> Vec<Handle> {
        self.held
            .values()
            .filter(|h| h.dead.is_none() && h.server_boot != server_boot)
            .map(|h| h.handle)
            .collect()
    }

    /// `server_boot` took the handle back.
    pub(crate) fn reopened(&mut self, handle: Handle, server_boot: u64) {
        if let Some(h) = self.held.get_mut(&handle.id) {
            h.server_boot = server_boot;
        }
    }

    /// The reopen was refused with `errno`: the handle is dead until released.
    pub(crate) fn died(&mut self, handle: Handle, errno: Errno) {
        if let Some(h) = self.held.get_mut(&handle.id) {
            h.dead = Some(errno);
        }
    }

    /// Handles held, dead ones among them.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITE_TRUNCATE: OpenFlags = OpenFlags {
        read: false,
        write: true,
        truncate: true,
        append: false,
        exec: false,
    };

    #[test]
    fn an_append_handle_writes_at_the_end_whatever_the_offset() {
        let mut handles = Handles::new();
        let append = OpenFlags {
            write: true,
            append: true,
            ..OpenFlags::default()
        };
        let at = |op: Op| match op {
            Op::Write { offset, .. } => offset,
            other => panic!("{other:?}"),
        };
        assert_eq!(at(handles.draw(10, append).write_op(5, vec![1])), u64::MAX);
        assert_eq!(at(handles.draw(10, WRITE_TRUNCATE).write_op(5, vec![1])), 5);
    }

    #[test]
    fn numbers_count_up_from_one_and_are_never_reused() {
        let mut handles = Handles::new();
        let a = handles.draw(10, OpenFlags::default());
        let b = handles.draw(10, OpenFlags::default());
        assert_eq!((a.id(), b.id()), (1, 2));
        assert_eq!((a.ino(), b.flags()), (10, OpenFlags::default()));
        handles.opened(a, 7);
        handles.forget(a);
        assert_eq!(
            handles.draw(11, WRITE_TRUNCATE).id(),
            3,
            "1 was released, not reused"
        );
        assert_eq!(handles.len(), 0, "drawn is not held until opened");
    }

    #[test]
    fn opened_handles_are_held_until_forgotten() {
        let mut handles = Handles::new();
        let a = handles.draw(10, WRITE_TRUNCATE);
        let b = handles.draw(20, OpenFlags::default());
        handles.opened(a, 7);
        handles.opened(b, 7);
        assert_eq!(handles.len(), 2);
        assert!(
            handles.to_reopen(7).is_empty(),
            "both are open on this start"
        );
        assert_eq!(
            handles.to_reopen(8),
            [a, b],
            "a new start reopens both, in order"
        );
        handles.forget(a);
        assert_eq!(handles.to_reopen(8), [b]);
        handles.forget(a); // twice is harmless
        assert_eq!(handles.len(), 1);
    }

    #[test]
    fn a_reopen_moves_a_handle_to_the_new_start_and_a_cut_one_is_tried_again() {
        let mut handles = Handles::new();
        let a = handles.draw(10, OpenFlags::default());
        let b = handles.draw(20, OpenFlags::default());
        handles.opened(a, 7);
        handles.opened(b, 7);
        // Start 8: a is taken back; b's answer is cut off with the connection.
        handles.reopened(a, 8);
        assert_eq!(
            handles.to_reopen(8),
            [b],
            "a connect to start 8 again still reopens b"
        );
        handles.reopened(b, 8);
        assert!(handles.to_reopen(8).is_empty());
    }

    #[test]
    fn a_refused_reopen_leaves_the_handle_dead_until_it_is_released() {
        let mut handles = Handles::new();
        let a = handles.draw(10, OpenFlags::default());
        let b = handles.draw(20, OpenFlags::default());
        handles.opened(a, 7);
        handles.opened(b, 7);
        handles.died(a, Errno::ESTALE);
        handles.reopened(b, 8);
        assert_eq!(handles.dead(a), Some(Errno::ESTALE));
        assert_eq!(handles.dead(b), None);
        assert!(
            handles.to_reopen(9).iter().all(|h| h.id() != a.id()),
            "a dead handle is never reopened"
        );
        assert_eq!(handles.len(), 2, "dead is still held");
        handles.forget(a);
        assert_eq!(handles.dead(a), None, "released: forgotten");
        // Marking a handle that is not held changes nothing.
        handles.died(a, Errno::EIO);
        handles.reopened(a, 9);
        assert_eq!(handles.len(), 1);
    }

    #[test]
    fn a_reopen_never_truncates_and_keeps_the_access() {
        let h = Handle {
            id: 5,
            ino: 10,
            flags: OpenFlags {
                append: true,
                ..WRITE_TRUNCATE
            },
        };
        assert_eq!(
            h.reopen_op(),
            Op::Open {
                ino: 10,
                handle: 5,
                flags: OpenFlags {
                    read: false,
                    write: true,
                    truncate: false,
                    append: true,
                    exec: false,
                },
                reopen: true,
            }
        );
        assert!(!h.reopen_op().is_mutation());
        assert!(h.open_op().is_mutation(), "the first open truncates");
        match h.truncate_op(3) {
            Op::Setattr { ino, attr } => {
                assert_eq!((ino, attr.size, attr.handle), (10, Some(3), Some(5)));
                assert_eq!(attr.mode, None);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(h.release_op(), Op::Release { handle: 5 });
    }
}
