//! Model-based property tests of the namespace: random sequences of operations run through
//! [`Namespace::execute`] and through a reference written here (a map of inodes, each
//! directory a map of names), every answer compared with the reference's — the errno, or the
//! reply's kind, mode, owner, link count, size and entries. Three names, a few directories,
//! and now and then a file, a removed inode or a bad name where a directory or name belongs,
//! so that EEXIST, ENOENT, ENOTEMPTY, ENOTDIR, EISDIR, ESTALE and EINVAL (a directory renamed
//! into itself) come often. After every step the whole tree is read back and checked against
//! the reference and against what holds without it (a directory's nlink is 2 + its
//! subdirectories, its size its number of entries, `counts()` what the root reaches); at the
//! end the journal records, replayed in transno order, must rebuild the live namespace, and
//! so must the same records committed to a real store, a few to a commit, and read back.
//!
//! A second property runs two clients with commit-on-share on and a `last_committed` that
//! moves at random: every answer must wait for (a mutation: be built on) exactly the newest
//! not-yet-durable change by the *other* client among the objects the operation looks at
//! (docs/design.md, "The operation table", as `ops/mod.rs` reads it), and answer what the first property's
//! reference answers. The tests at the end are the cases it once found where the server did
//! not do what that table says.
//!
//! `PROPTEST_CASES=10000` runs longer.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, BTreeSet};

use journal::{ROOT_INO, TxRecord};
use proptest::prelude::*;
use proptest::{option, sample};

use super::tests::{Image, empty, replay, snapshot, without_atimes};
use super::{Caller, Exec, Namespace};
use mds_proto::name_order;
use mds_proto::{
    Attr, Body, Cred, DirEntry, Errno, Kind, MAX_READDIR, Op, RenameHow, SetAttr, SetTime,
};

// ---------------------------------------------------------------------------------------------
// The steps, as generated.

/// Which inode a step names. Resolved against the reference when the step runs, so a step
/// still names something after shrinking has removed the ones before it.
#[derive(Clone, Copy, Debug)]
enum Pick {
    /// The i-th live directory (modulo their number), in creation order: `Dir(0)` is the root.
    Dir(usize),
    /// The i-th live inode, file or directory.
    Live(usize),
    /// The i-th inode ever created, live or removed.
    Any(usize),
}

#[derive(Clone, Debug)]
enum Step {
    Mkdir {
        parent: Pick,
        name: String,
        mode: u32,
    },
    Create {
        parent: Pick,
        name: String,
        mode: u32,
    },
    Lookup {
        parent: Pick,
        name: String,
    },
    Getattr {
        ino: Pick,
    },
    Setattr {
        ino: Pick,
        attr: SetAttr,
    },
    Readdir {
        dir: Pick,
        cursor: Option<String>,
        limit: u32,
    },
    Unlink {
        parent: Pick,
        name: String,
    },
    Rmdir {
        parent: Pick,
        name: String,
    },
    Rename {
        src_parent: Pick,
        src_name: String,
        dst_parent: Pick,
        dst_name: String,
    },
}

/// Mostly three names, so operations collide; sometimes one the name rules refuse.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => sample::select(vec!["a", "b", "c", "one-shared-end", "two-shared-end"]).prop_map(String::from),
        1 => sample::select(vec!["", ".", "..", "a/b", "a\0"]).prop_map(String::from),
        1 => Just("n".repeat(256)),
    ]
}

/// Where a directory is expected: mostly one, sometimes a file (ENOTDIR) or a removed inode
/// (ESTALE).
fn parent() -> impl Strategy<Value = Pick> {
    prop_oneof![
        16 => (0..6usize).prop_map(Pick::Dir),
        2 => (0..12usize).prop_map(Pick::Live),
        2 => (0..12usize).prop_map(Pick::Any),
    ]
}

/// Where any inode is expected.
fn inode() -> impl Strategy<Value = Pick> {
    prop_oneof![
        6 => (0..12usize).prop_map(Pick::Live),
        2 => (0..6usize).prop_map(Pick::Dir),
        2 => (0..12usize).prop_map(Pick::Any),
    ]
}

/// Permission bits, and type bits the server must mask off.
fn mode() -> impl Strategy<Value = u32> {
    sample::select(vec![0o644, 0o755, 0o4711, 0o100_600])
}

fn set_attr() -> impl Strategy<Value = SetAttr> {
    (
        option::of(mode()),
        option::of(0..3u32),
        option::of(0..3u32),
        option::weighted(0.25, sample::select(vec![0u64, 1, 1 << 40])),
        option::of(time()),
        option::weighted(0.25, time()),
    )
        .prop_map(|(mode, uid, gid, size, mtime, atime)| SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            handle: None,
        })
}

/// A time SETATTR sets: the server's clock, or one of a few given ones.
fn time() -> impl Strategy<Value = SetTime> {
    prop_oneof![
        1 => Just(SetTime::Now),
        4 => sample::select(vec![0i64, 1, -1, i64::MAX]).prop_map(SetTime::At),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (parent(), name(), mode())
            .prop_map(|(parent, name, mode)| Step::Create { parent, name, mode }),
        4 => (parent(), name(), mode())
            .prop_map(|(parent, name, mode)| Step::Mkdir { parent, name, mode }),
        2 => (parent(), name()).prop_map(|(parent, name)| Step::Lookup { parent, name }),
        1 => inode().prop_map(|ino| Step::Getattr { ino }),
        2 => (inode(), set_attr()).prop_map(|(ino, attr)| Step::Setattr { ino, attr }),
        2 => (
            parent(),
            option::of(name()),
            prop_oneof![4 => 0..4u32, 1 => Just(u32::MAX)],
        )
            .prop_map(|(dir, cursor, limit)| Step::Readdir { dir, cursor, limit }),
        3 => (parent(), name()).prop_map(|(parent, name)| Step::Unlink { parent, name }),
        3 => (parent(), name()).prop_map(|(parent, name)| Step::Rmdir { parent, name }),
        6 => (parent(), name(), parent(), name()).prop_map(
            |(src_parent, src_name, dst_parent, dst_name)| Step::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
            }
        ),
    ]
}

/// The two-client property's steps.
#[derive(Clone, Debug)]
enum Action {
    /// Client 0 or 1 runs a step.
    Run { client: usize, step: Step },
    /// The committer makes every transno durable but the newest `keep`.
    Commit { keep: u64 },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => (0..2usize, step()).prop_map(|(client, step)| Action::Run { client, step }),
        1 => (0..4u64).prop_map(|keep| Action::Commit { keep }),
    ]
}

// ---------------------------------------------------------------------------------------------
// The reference.

/// The reference's view of one inode.
#[derive(Clone, Debug)]
struct ModelInode {
    kind: Kind,
    mode: u32,
    uid: u32,
    gid: u32,
    /// Files: the size SETATTR set.
    size: u64,
    /// The transno that created it.
    generation: u64,
    /// Directories: the directory holding it (the root is its own).
    parent: u64,
    /// Directories: name → inode.
    entries: BTreeMap<String, u64>,
    /// The mtime as last told (the create's reply, or SETATTR), until the server's clock
    /// moves it (a directory's entries changed): then only the clock knows it.
    mtime: Option<i64>,
}

/// What commit-on-share locks: a directory entry by (parent, name), across its removals and
/// re-creations; an inode itself (created, SETATTR, moved, removed); a directory's set of
/// entries (and with it its size, nlink and mtime).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Obj {
    Entry(u64, String),
    Inode(u64),
    Content(u64),
}

/// What one operation looked at and, if it was a mutation, changed and in which transno.
#[derive(Debug, Default)]
struct Footprint {
    reads: Vec<Obj>,
    writes: Vec<Obj>,
    transno: Option<u64>,
}

/// The reference namespace: POSIX as docs/design.md ("The namespace") and docs/namespace.md word it, with no locks, stamps or stripes.
#[derive(Debug)]
struct Model {
    live: BTreeMap<u64, ModelInode>,
    /// Every inode number handed out, root first, in creation order: what a [`Pick`] indexes.
    created: Vec<u64>,
    last_transno: u64,
}

/// docs/design.md's name rules ("The namespace"), written out again rather than calling `check_name`, so that a
/// slip in either shows.
fn name_rule(name: &str) -> Result<(), Errno> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        Err(Errno::EINVAL)
    } else if name.len() > 255 {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

/// The server's answer without its commit-on-share part: the transno if it was a mutation,
/// and the result.
fn answer(exec: &Exec) -> (Option<u64>, Result<&Body, Errno>) {
    match exec {
        Exec::Now { result, .. } => (None, result.as_ref().map_err(|e| *e)),
        Exec::Mutation { transno, body, .. } => (Some(*transno), Ok(body)),
    }
}

/// What another client's change held this answer back by: `wait` or `built_on`.
fn held_by(exec: &Exec) -> u64 {
    match exec {
        Exec::Now { wait, .. } => *wait,
        Exec::Mutation { built_on, .. } => *built_on,
    }
}

/// One line of a failure's history.
fn summary(exec: &Exec) -> String {
    match exec {
        Exec::Now { result, wait } => format!("{result:?} wait={wait}"),
        Exec::Mutation {
            transno,
            body,
            built_on,
            ..
        } => format!("t{transno} {body:?} built_on={built_on}"),
    }
}

/// The answer must be this error, and not a mutation.
fn refused(exec: &Exec, errno: Errno, fp: Footprint) -> Result<Footprint, String> {
    if answer(exec) == (None, Err(errno)) {
        Ok(fp)
    } else {
        Err(format!("want {errno}, got {}", summary(exec)))
    }
}

/// The answer must be a read (no transno) that succeeded.
fn read_body(exec: &Exec) -> Result<&Body, String> {
    match answer(exec) {
        (None, Ok(body)) => Ok(body),
        _ => Err(format!("want a successful read, got {}", summary(exec))),
    }
}

impl Model {
    fn new() -> Model {
        // As `journal::Inode::root(0)`, which `tests::empty` starts from.
        let root = ModelInode {
            kind: Kind::Directory,
            mode: 0o1777,
            uid: 0,
            gid: 0,
            size: 0,
            generation: 0,
            parent: ROOT_INO,
            entries: BTreeMap::new(),
            mtime: Some(0),
        };
        Model {
            live: BTreeMap::from([(ROOT_INO, root)]),
            created: vec![ROOT_INO],
            last_transno: 0,
        }
    }

    fn resolve(&self, pick: Pick) -> u64 {
        let (inos, i): (Vec<u64>, usize) = match pick {
            Pick::Dir(i) => (
                self.created
                    .iter()
                    .copied()
                    .filter(|ino| self.is_dir(*ino))
                    .collect(),
                i,
            ),
            Pick::Live(i) => (
                self.created
                    .iter()
                    .copied()
                    .filter(|ino| self.live.contains_key(ino))
                    .collect(),
                i,
            ),
            Pick::Any(i) => (self.created.clone(), i),
        };
        inos[i % inos.len()]
    }

    /// The operation a step means in the namespace as it is now.
    fn op(&self, step: &Step) -> Op {
        match step.clone() {
            Step::Mkdir { parent, name, mode } => Op::Mkdir {
                parent: self.resolve(parent),
                name,
                mode,
            },
            Step::Create { parent, name, mode } => Op::Create {
                parent: self.resolve(parent),
                name,
                mode,
            },
            Step::Lookup { parent, name } => Op::Lookup {
                parent: self.resolve(parent),
                name,
            },
            Step::Getattr { ino } => Op::Getattr {
                ino: self.resolve(ino),
            },
            Step::Setattr { ino, attr } => Op::Setattr {
                ino: self.resolve(ino),
                attr,
            },
            Step::Readdir { dir, cursor, limit } => Op::Readdir {
                ino: self.resolve(dir),
                cursor,
                limit,
            },
            Step::Unlink { parent, name } => Op::Unlink {
                parent: self.resolve(parent),
                name,
            },
            Step::Rmdir { parent, name } => Op::Rmdir {
                parent: self.resolve(parent),
                name,
            },
            Step::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
            } => Op::Rename {
                src_parent: self.resolve(src_parent),
                src_name,
                dst_parent: self.resolve(dst_parent),
                dst_name,
                how: RenameHow::Replace,
            },
        }
    }

    fn is_dir(&self, ino: u64) -> bool {
        self.live
            .get(&ino)
            .is_some_and(|n| n.kind == Kind::Directory)
    }

    fn entries(&self, dir: u64) -> &BTreeMap<String, u64> {
        &self.live[&dir].entries
    }

    /// Directories: 2 + subdirectories. Files: 1 (there is no LINK).
    fn nlink(&self, ino: u64) -> u32 {
        match self.live[&ino].kind {
            Kind::Directory => {
                2 + self
                    .entries(ino)
                    .values()
                    .filter(|c| self.is_dir(**c))
                    .count() as u32
            }
            _ => 1,
        }
    }

    /// (directories, files), the root included.
    fn counts(&self) -> super::Counts {
        let dirs = self.live.values().filter(|n| n.kind == Kind::Directory);
        let dirs = dirs.count() as u64;
        let file_bytes = self
            .live
            .values()
            .filter(|n| n.kind == Kind::File)
            .map(|n| n.size)
            .sum();
        super::Counts {
            directories: dirs,
            files: self.live.len() as u64 - dirs,
            file_bytes,
            ..super::Counts::default()
        }
    }

    /// Whether directory `ancestor` is `dir` or above it. The answer rests on where every
    /// directory passed on the way up is (all but `ancestor`): they go to `passed`.
    fn is_ancestor(&self, ancestor: u64, mut dir: u64, passed: &mut Vec<Obj>) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            passed.push(Obj::Inode(dir));
            if dir == ROOT_INO {
                return false;
            }
            dir = self.live[&dir].parent;
        }
    }

    /// A directory operation's parent: ESTALE if it is gone, ENOTDIR if it is a file. A
    /// refusal builds on the change that made the inode so (its removal, or its creation as
    /// a file): then the inode goes to `fp`'s reads.
    fn parent_dir(&self, ino: u64, fp: &mut Footprint) -> Result<(), Errno> {
        let checked = match self.live.get(&ino) {
            None => Err(Errno::ESTALE),
            Some(n) if n.kind == Kind::File => Err(Errno::ENOTDIR),
            Some(_) => Ok(()),
        };
        if checked.is_err() {
            fp.reads.push(Obj::Inode(ino));
        }
        checked
    }

    /// What reading an inode looks at: the inode, and a directory's entries too (its size,
    /// nlink and mtime move with them).
    fn inode_objs(&self, ino: u64) -> Vec<Obj> {
        let mut objs = vec![Obj::Inode(ino)];
        if self.is_dir(ino) {
            objs.push(Obj::Content(ino));
        }
        objs
    }

    /// Whether `got` is what the reference says of `ino`. ctime, and mtime while only the
    /// clock knows it, are taken from `got`.
    fn check_attr(&self, ino: u64, got: &Attr) -> Result<(), String> {
        let n = self
            .live
            .get(&ino)
            .ok_or_else(|| format!("inode {ino} should be gone, got {got:?}"))?;
        let want = Attr {
            ino,
            kind: n.kind,
            mode: n.mode,
            uid: n.uid,
            gid: n.gid,
            nlink: self.nlink(ino),
            size: match n.kind {
                Kind::Directory => n.entries.len() as u64,
                _ => n.size,
            },
            // Reads move the atime (relatime): only the clock knows it.
            atime_ns: got.atime_ns,
            ctime_ns: got.ctime_ns,
            mtime_ns: n.mtime.unwrap_or(got.mtime_ns),
            rdev: 0,
            generation: n.generation,
            // Data is off (sizes are numbers): no file holds any.
            blocks: 0,
        };
        if *got == want {
            Ok(())
        } else {
            Err(format!("inode {ino}: got {got:?}, want {want:?}"))
        }
    }

    /// The answer must be a mutation taking the next transno, its record that transno.
    fn mutation<'e>(&mut self, exec: &'e Exec, fp: &mut Footprint) -> Result<&'e Body, String> {
        let Exec::Mutation {
            transno,
            record,
            body,
            ..
        } = exec
        else {
            return Err(format!("want a mutation, got {}", summary(exec)));
        };
        if *transno != self.last_transno + 1 || record.transno != *transno {
            return Err(format!(
                "want transno {}, got {transno} (record {})",
                self.last_transno + 1,
                record.transno
            ));
        }
        self.last_transno = *transno;
        fp.transno = Some(*transno);
        Ok(body)
    }

    /// Checks the server's answer to `op` (asked with `cred`) against the reference, and
    /// applies it to the reference. Returns what the operation looked at and changed, in the
    /// order the server checks: an answer refused early looks at less.
    fn apply(&mut self, op: &Op, cred: &Cred, exec: &Exec) -> Result<Footprint, String> {
        let mut fp = Footprint::default();
        match op {
            Op::Mkdir { parent, name, mode } | Op::Create { parent, name, mode } => {
                let (p, kind) = match op {
                    Op::Mkdir { .. } => (*parent, Kind::Directory),
                    _ => (*parent, Kind::File),
                };
                if let Err(e) = name_rule(name) {
                    return refused(exec, e, fp);
                }
                if let Err(e) = self.parent_dir(p, &mut fp) {
                    return refused(exec, e, fp);
                }
                fp.reads.push(Obj::Inode(p));
                fp.reads.push(Obj::Entry(p, name.clone()));
                if self.entries(p).contains_key(name) {
                    return refused(exec, Errno::EEXIST, fp);
                }
                let body = self.mutation(exec, &mut fp)?;
                let Body::Attr(attr) = body else {
                    return Err(format!("want an Attr, got {body:?}"));
                };
                let ino = attr.ino;
                // Never handed out twice. Not in order: a directory takes a block of its
                // own, past the run the files take theirs from (`ino_run`).
                if self.created.contains(&ino) {
                    return Err(format!("inode {ino} handed out again"));
                }
                self.created.push(ino);
                self.live.insert(
                    ino,
                    ModelInode {
                        kind,
                        // Linux: a new directory takes permissions and the sticky bit only.
                        mode: if kind == Kind::Directory {
                            mode & 0o1777
                        } else {
                            mode & 0o7777
                        },
                        uid: cred.uid,
                        gid: cred.gid,
                        size: 0,
                        generation: self.last_transno,
                        parent: p,
                        entries: BTreeMap::new(),
                        mtime: Some(attr.mtime_ns),
                    },
                );
                let dir = self.live.get_mut(&p).expect("checked");
                dir.entries.insert(name.clone(), ino);
                dir.mtime = None;
                self.check_attr(ino, attr)?;
                fp.writes = vec![
                    Obj::Entry(p, name.clone()),
                    Obj::Content(p),
                    Obj::Inode(ino),
                ];
            }
            Op::Lookup { parent, name } if name == ".." => {
                // The directory's parent: built on the directory's inode (a rename moves it)
                // and the parent's, whose attributes it answers.
                if let Err(e) = self.parent_dir(*parent, &mut fp) {
                    return refused(exec, e, fp);
                }
                fp.reads.push(Obj::Inode(*parent));
                let up = self.live[parent].parent;
                fp.reads.extend(self.inode_objs(up));
                match read_body(exec)? {
                    Body::Attr(attr) => self.check_attr(up, attr)?,
                    other => return Err(format!("want an Attr, got {other:?}")),
                }
            }
            Op::Lookup { parent, name } => {
                if let Err(e) = name_rule(name) {
                    return refused(exec, e, fp);
                }
                if let Err(e) = self.parent_dir(*parent, &mut fp) {
                    return refused(exec, e, fp);
                }
                fp.reads.push(Obj::Entry(*parent, name.clone()));
                let Some(&child) = self.entries(*parent).get(name) else {
                    return refused(exec, Errno::ENOENT, fp);
                };
                fp.reads.extend(self.inode_objs(child));
                match read_body(exec)? {
                    Body::Attr(attr) => self.check_attr(child, attr)?,
                    other => return Err(format!("want an Attr, got {other:?}")),
                }
            }
            Op::Getattr { ino } => {
                if !self.live.contains_key(ino) {
                    // Built on the inode's removal.
                    fp.reads.push(Obj::Inode(*ino));
                    return refused(exec, Errno::ESTALE, fp);
                }
                fp.reads.extend(self.inode_objs(*ino));
                match read_body(exec)? {
                    Body::Attr(attr) => self.check_attr(*ino, attr)?,
                    other => return Err(format!("want an Attr, got {other:?}")),
                }
            }
            Op::Setattr { ino, attr: set } => {
                let Some(node) = self.live.get(ino) else {
                    // Built on the inode's removal.
                    fp.reads.push(Obj::Inode(*ino));
                    return refused(exec, Errno::ESTALE, fp);
                };
                fp.reads.extend(self.inode_objs(*ino));
                if set.size.is_some() && node.kind == Kind::Directory {
                    return refused(exec, Errno::EISDIR, fp);
                }
                let body = self.mutation(exec, &mut fp)?;
                let node = self.live.get_mut(ino).expect("checked");
                let SetAttr {
                    mode,
                    uid,
                    gid,
                    size,
                    atime: _,
                    mtime,
                    handle: _,
                } = set.clone();
                if let Some(mode) = mode {
                    node.mode = mode & 0o7777;
                } else if node.kind == Kind::File && (uid.is_some() || gid.is_some()) {
                    // A new owner or group takes set-user-ID away from a file, and set-group-ID
                    // where group execute makes it "run as the group" — for root too.
                    node.mode &= !0o4000;
                    if node.mode & 0o2010 == 0o2010 {
                        node.mode &= !0o2000;
                    }
                }
                node.uid = uid.unwrap_or(node.uid);
                node.gid = gid.unwrap_or(node.gid);
                node.size = size.unwrap_or(node.size);
                if size.is_some() {
                    // A truncate changes the data: the mtime is the server's clock's.
                    node.mtime = None;
                }
                match mtime {
                    Some(SetTime::At(ns)) => node.mtime = Some(ns),
                    Some(SetTime::Now) => node.mtime = None,
                    None => {}
                }
                match body {
                    Body::Attr(attr) => self.check_attr(*ino, attr)?,
                    other => return Err(format!("want an Attr, got {other:?}")),
                }
                fp.writes = vec![Obj::Inode(*ino)];
            }
            Op::Readdir { ino, cursor, limit } => {
                if let Err(e) = self.parent_dir(*ino, &mut fp) {
                    return refused(exec, e, fp);
                }
                fp.reads.extend(self.inode_objs(*ino));
                // A limit of 0 still returns one entry; past MAX_READDIR, MAX_READDIR.
                let limit = (*limit).clamp(1, MAX_READDIR) as usize;
                // In directory order (`dir.rs`), after the cursor in that order.
                let mut after: Vec<DirEntry> = self
                    .entries(*ino)
                    .iter()
                    .filter(|(name, _)| {
                        cursor.as_ref().is_none_or(|c| {
                            name_order(name.as_bytes(), c.as_bytes()) == CmpOrdering::Greater
                        })
                    })
                    .map(|(name, child)| DirEntry {
                        name: name.clone(),
                        ino: *child,
                        kind: self.live[child].kind,
                    })
                    .collect();
                after.sort_by(|a, b| name_order(a.name.as_bytes(), b.name.as_bytes()));
                let more = after.len() > limit;
                after.truncate(limit);
                let want = Body::Entries {
                    next: more.then(|| after.last().expect("limit >= 1").name.clone()),
                    entries: after,
                };
                let got = read_body(exec)?;
                if *got != want {
                    return Err(format!("want {want:?}, got {got:?}"));
                }
            }
            Op::Unlink { parent, name } | Op::Rmdir { parent, name } => {
                let rmdir = matches!(op, Op::Rmdir { .. });
                if let Err(e) = name_rule(name) {
                    return refused(exec, e, fp);
                }
                if let Err(e) = self.parent_dir(*parent, &mut fp) {
                    return refused(exec, e, fp);
                }
                fp.reads.push(Obj::Entry(*parent, name.clone()));
                let Some(&child) = self.entries(*parent).get(name) else {
                    return refused(exec, Errno::ENOENT, fp);
                };
                match (rmdir, self.is_dir(child)) {
                    (false, true) => return refused(exec, Errno::EISDIR, fp),
                    (true, false) => return refused(exec, Errno::ENOTDIR, fp),
                    _ => {}
                }
                fp.reads.extend(self.inode_objs(child));
                if rmdir && !self.entries(child).is_empty() {
                    return refused(exec, Errno::ENOTEMPTY, fp);
                }
                let body = self.mutation(exec, &mut fp)?;
                if *body != Body::Done {
                    return Err(format!("want Done, got {body:?}"));
                }
                self.live.remove(&child);
                let dir = self.live.get_mut(parent).expect("checked");
                dir.entries.remove(name);
                dir.mtime = None;
                fp.writes = vec![
                    Obj::Content(*parent),
                    Obj::Entry(*parent, name.clone()),
                    Obj::Inode(child),
                ];
            }
            Op::Rename {
                src_parent: sp,
                src_name: sn,
                dst_parent: dp,
                dst_name: dn,
                ..
            } => {
                let (sp, dp) = (*sp, *dp);
                if let Err(e) = name_rule(sn).and(name_rule(dn)) {
                    return refused(exec, e, fp);
                }
                if let Err(e) = self.parent_dir(sp, &mut fp) {
                    return refused(exec, e, fp);
                }
                fp.reads.push(Obj::Inode(sp));
                if let Err(e) = self.parent_dir(dp, &mut fp) {
                    return refused(exec, e, fp);
                }
                fp.reads.push(Obj::Inode(dp));
                fp.reads.push(Obj::Entry(sp, sn.clone()));
                let Some(&src) = self.entries(sp).get(sn) else {
                    return refused(exec, Errno::ENOENT, fp);
                };
                fp.reads.push(Obj::Entry(dp, dn.clone()));
                if sp == dp && sn == dn {
                    // POSIX: renaming a name onto itself does nothing, successfully.
                    let body = read_body(exec)?;
                    return if *body == Body::Done {
                        Ok(fp)
                    } else {
                        Err(format!("want Done, got {body:?}"))
                    };
                }
                let dst = self.entries(dp).get(dn).copied();
                let src_is_dir = self.is_dir(src);
                // Linux's order: a directory moved into its own subtree is refused before the
                // kinds are compared, so renaming one onto a file inside itself is EINVAL.
                if src_is_dir && sp != dp && self.is_ancestor(src, dp, &mut fp.reads) {
                    return refused(exec, Errno::EINVAL, fp);
                }
                // And a target directory that holds the source on its way down is not empty,
                // said before the kinds are compared too.
                if let Some(dst) = dst
                    && self.is_dir(dst)
                    && sp != dp
                    && self.is_ancestor(dst, sp, &mut fp.reads)
                {
                    return refused(exec, Errno::ENOTEMPTY, fp);
                }
                if let Some(dst) = dst {
                    match (src_is_dir, self.is_dir(dst)) {
                        (true, false) => return refused(exec, Errno::ENOTDIR, fp),
                        (false, true) => return refused(exec, Errno::EISDIR, fp),
                        _ => {}
                    }
                }
                fp.reads.extend(self.inode_objs(src));
                if let Some(dst) = dst {
                    fp.reads.extend(self.inode_objs(dst));
                    if self.is_dir(dst) && !self.entries(dst).is_empty() {
                        return refused(exec, Errno::ENOTEMPTY, fp);
                    }
                }
                let body = self.mutation(exec, &mut fp)?;
                if *body != Body::Done {
                    return Err(format!("want Done, got {body:?}"));
                }
                let s = self.live.get_mut(&sp).expect("checked");
                s.entries.remove(sn);
                s.mtime = None;
                if let Some(dst) = dst {
                    self.live.remove(&dst);
                }
                let d = self.live.get_mut(&dp).expect("checked");
                d.entries.insert(dn.clone(), src);
                d.mtime = None;
                if src_is_dir {
                    self.live.get_mut(&src).expect("checked").parent = dp;
                }
                fp.writes = vec![
                    Obj::Content(sp),
                    Obj::Entry(sp, sn.clone()),
                    Obj::Content(dp),
                    Obj::Entry(dp, dn.clone()),
                    Obj::Inode(src),
                ];
                fp.writes.extend(dst.map(Obj::Inode));
            }
            Op::Connect { .. } | Op::Authenticate { .. } | Op::Ping | Op::Statfs | Op::Sync => {
                return refused(exec, Errno::EPROTO, fp);
            }
            // The reference models the operations of directories and regular files; links,
            // special files and attributes are checked by the concurrent walk in `tests.rs`
            // and through the server in `mds/tests/posix.rs`.
            other => return Err(format!("not modelled: {other:?}")),
        }
        Ok(fp)
    }
}

/// Commit-on-share as docs/design.md words it ("Commit-on-share"): every change to every object by (client, transno),
/// so an answer's wait is the newest change by another client, among what it looked at, that
/// is not durable yet.
#[derive(Debug, Default)]
struct Changes(BTreeMap<Obj, Vec<(u64, u64)>>);

impl Changes {
    fn holding(&self, reads: &[Obj], client: u64, last_committed: u64) -> u64 {
        reads
            .iter()
            .filter_map(|obj| self.0.get(obj))
            .flatten()
            .filter(|(by, transno)| *by != client && *transno > last_committed)
            .map(|(_, transno)| *transno)
            .max()
            .unwrap_or(0)
    }

    fn record(&mut self, writes: &[Obj], client: u64, transno: u64) {
        for obj in writes {
            self.0
                .entry(obj.clone())
                .or_default()
                .push((client, transno));
        }
    }

    /// Forgets durable changes: they hold nobody.
    fn commit(&mut self, last_committed: u64) {
        self.0.retain(|_, changes| {
            changes.retain(|(_, transno)| *transno > last_committed);
            !changes.is_empty()
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Driving the server and the reference side by side.

/// Client identities; the reader reads the tree back between steps with commit-on-share off.
const CLIENTS: [u64; 2] = [1, 2];
const READER: u64 = 99;
/// The `last_committed` that turns commit-on-share off.
const COS_OFF: u64 = u64::MAX;

/// A namespace, the reference beside it, and the history so far for a failure's message.
struct Harness {
    ns: Namespace,
    model: Model,
    creds: [Cred; 2],
    initial: Image,
    records: Vec<TxRecord>,
    log: Vec<String>,
}

impl Harness {
    fn new() -> Harness {
        let ns = empty();
        let initial = snapshot(&ns);
        Harness {
            ns,
            model: Model::new(),
            // Both root, whom permissions never refuse and whose answers they never make
            // depend on another client's change: this property is about commit-on-share and
            // the namespace's own rules. Different groups, so the owner of what each creates
            // still shows whose it is. Permissions have their own tests (`perm.rs`,
            // `tests/permissions.rs`) and the commit-on-share of their checks its own cases
            // below.
            creds: [
                Cred {
                    uid: 0,
                    gid: 100,
                    groups: Vec::new(),
                },
                Cred {
                    uid: 0,
                    gid: 200,
                    groups: Vec::new(),
                },
            ],
            initial,
            records: Vec::new(),
            log: Vec::new(),
        }
    }

    /// Runs `op` for client `client` judged against `last_committed`, checks the answer
    /// against the reference, and returns the footprint with what the server said held it.
    fn run(
        &mut self,
        client: usize,
        op: Op,
        last_committed: u64,
    ) -> Result<(Footprint, u64), String> {
        let caller = Caller {
            client: CLIENTS[client],
            cred: &self.creds[client],
            last_committed,
            reuse_ino: None,
            replay: false,
            atime: mds_proto::Atime::default(),
        };
        let exec = self.ns.execute(op.clone(), &caller);
        self.log
            .push(format!("client {client}: {op:?} -> {}", summary(&exec)));
        let fp = self.model.apply(&op, &self.creds[client], &exec)?;
        let held = held_by(&exec);
        if let Exec::Mutation { record, .. } = exec {
            self.records.push(record);
        }
        Ok((fp, held))
    }

    /// A read by a client that never waits.
    fn read(&self, op: Op) -> Result<Result<Body, Errno>, String> {
        let caller = Caller {
            client: READER,
            cred: &self.creds[0],
            last_committed: COS_OFF,
            reuse_ino: None,
            replay: false,
            atime: mds_proto::Atime::default(),
        };
        match self.ns.execute(op.clone(), &caller) {
            Exec::Now { result, wait: 0 } => Ok(result),
            other => Err(format!("{op:?} is a read, got {}", summary(&other))),
        }
    }

    fn getattr(&self, ino: u64) -> Result<Result<Attr, Errno>, String> {
        Ok(match self.read(Op::Getattr { ino })? {
            Ok(Body::Attr(attr)) => Ok(attr),
            Ok(other) => return Err(format!("GETATTR {ino}: {other:?}")),
            Err(e) => Err(e),
        })
    }

    /// A directory's whole listing, two entries a page, so the cursor is used.
    fn list(&self, dir: u64) -> Result<Vec<DirEntry>, String> {
        let mut all: Vec<DirEntry> = Vec::new();
        let mut cursor = None;
        loop {
            let op = Op::Readdir {
                ino: dir,
                cursor: cursor.clone(),
                limit: 2,
            };
            let Ok(Body::Entries { entries, next }) = self.read(op)? else {
                return Err(format!("READDIR {dir} failed"));
            };
            if entries.is_empty() && next.is_some() || entries.len() > 2 {
                return Err(format!("READDIR {dir}: page {entries:?} next {next:?}"));
            }
            if next.is_some() && next.as_ref() != entries.last().map(|e| &e.name) {
                return Err(format!("READDIR {dir}: next {next:?} is not the last name"));
            }
            all.extend(entries);
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if !all
            .windows(2)
            .all(|w| name_order(w[0].name.as_bytes(), w[1].name.as_bytes()) == CmpOrdering::Less)
        {
            return Err(format!("READDIR {dir}: names not in order: {all:?}"));
        }
        Ok(all)
    }

    /// Reads every inode the reference knows and every directory's listing back, and checks
    /// them against the reference.
    fn check_against_model(&self) -> Result<(), String> {
        for &ino in &self.model.created {
            match self.getattr(ino)? {
                Ok(attr) => self.model.check_attr(ino, &attr)?,
                Err(Errno::ESTALE) if !self.model.live.contains_key(&ino) => {}
                Err(e) => return Err(format!("GETATTR {ino}: {e}")),
            }
        }
        for (&dir, node) in &self.model.live {
            if node.kind != Kind::Directory {
                continue;
            }
            let mut want: Vec<DirEntry> = node
                .entries
                .iter()
                .map(|(name, ino)| DirEntry {
                    name: name.clone(),
                    ino: *ino,
                    kind: self.model.live[ino].kind,
                })
                .collect();
            want.sort_by(|a, b| name_order(a.name.as_bytes(), b.name.as_bytes()));
            let got = self.list(dir)?;
            if got != want {
                return Err(format!("listing of {dir}: got {got:?}, want {want:?}"));
            }
        }
        if self.ns.counts() != self.model.counts() {
            return Err(format!(
                "counts: got {:?}, want {:?}",
                self.ns.counts(),
                self.model.counts()
            ));
        }
        if self.ns.last_transno() != self.model.last_transno {
            return Err(format!(
                "last transno: got {}, want {}",
                self.ns.last_transno(),
                self.model.last_transno
            ));
        }
        Ok(())
    }

    /// Walks the server's tree from the root and checks what holds without any reference:
    /// a tree (every directory reached once), each directory's nlink 2 + its subdirectories,
    /// its size its number of entries, its parent the directory it was reached from, each
    /// entry's kind its inode's, each file's nlink 1, and `counts()` what was reached.
    fn check_invariants(&self) -> Result<(), String> {
        let (mut dirs, mut files) = (0u64, 0u64);
        let mut seen = BTreeSet::new();
        let mut todo = vec![(ROOT_INO, ROOT_INO)];
        while let Some((dir, parent)) = todo.pop() {
            if !seen.insert(dir) {
                return Err(format!("directory {dir} reached twice"));
            }
            dirs += 1;
            let attr = self
                .getattr(dir)?
                .map_err(|e| format!("GETATTR {dir}: {e}"))?;
            let entries = self.list(dir)?;
            let subdirs = entries.iter().filter(|e| e.kind == Kind::Directory).count();
            if attr.kind != Kind::Directory
                || attr.nlink as usize != 2 + subdirs
                || attr.size as usize != entries.len()
            {
                return Err(format!("directory {dir}: {attr:?} holding {entries:?}"));
            }
            let recorded_parent = {
                let l = self.ns.table.lock(&[dir]);
                l.get(dir).map(|n| n.attr.parent)
            };
            if recorded_parent != Some(parent) {
                return Err(format!(
                    "directory {dir} reached from {parent} says its parent is {recorded_parent:?}"
                ));
            }
            for entry in entries {
                let child = self
                    .getattr(entry.ino)?
                    .map_err(|e| format!("entry {dir}/{} names {}: {e}", entry.name, entry.ino))?;
                if child.kind != entry.kind {
                    return Err(format!("entry {entry:?} in {dir} names {child:?}"));
                }
                match entry.kind {
                    Kind::Directory => todo.push((entry.ino, dir)),
                    _ if child.nlink != 1 => {
                        return Err(format!("file {child:?} has one name"));
                    }
                    _ => files += 1,
                }
            }
        }
        let counts = self.ns.counts();
        if (counts.directories, counts.files, counts.others) != (dirs, files, 0) {
            return Err(format!(
                "counts() {:?}, but the root reaches {dirs} directories and {files} files",
                self.ns.counts()
            ));
        }
        Ok(())
    }

    /// The records, replayed in transno order over the start, rebuild the live namespace
    /// (but the atimes reads moved, which relatime leaves unjournaled).
    fn check_replay(&self) -> Result<(), String> {
        let replayed = replay(self.initial.clone(), self.records.clone());
        if without_atimes(replayed) != without_atimes(snapshot(&self.ns)) {
            return Err("replaying the records does not rebuild the live namespace".into());
        }
        Ok(())
    }

    /// The records committed to a real store, `per_commit` to a commit, and read back as a
    /// start-up reads it (`Journal::scan_namespace`), rebuild the live namespace (but the
    /// atimes). The store keeps a new inode's image in its entry until the inode changes
    /// (schema 6): however creates, renames, links and removals fall into commits, what it
    /// reads back must be what was live. Then again with the edit log (`journal/src/store/
    /// edits.rs`), checkpointing every few commits: read back while the checkpointer holds
    /// the last edits, by a read-only open after a crash that left them, and after the open
    /// that writes them out.
    fn check_store(&self, per_commit: usize) -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let journal = self.commit_to_store(dir.path(), per_commit, None)?;
        self.compare_store(&journal, per_commit, "keyed")?;

        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let edit_log = journal::EditLog {
            checkpoint_bytes: 256,
        };
        let journal = self.commit_to_store(dir.path(), per_commit, Some(edit_log))?;
        self.compare_store(&journal, per_commit, "edit log, live")?;
        journal.close_without_checkpoint();
        let (read_only, _) = journal::Journal::open_read_only(dir.path())
            .map_err(|e| format!("opening the store read-only: {e}"))?;
        self.compare_store(&read_only, per_commit, "edit log, read-only after a crash")?;
        drop(read_only);
        let (reopened, _) = journal::Journal::open(dir.path(), journal::JournalOptions::default())
            .map_err(|e| format!("reopening the store: {e}"))?;
        self.compare_store(
            &reopened,
            per_commit,
            "edit log, written out at the next open",
        )
    }

    /// A new store in `dir` with the records committed, `per_commit` to a commit.
    fn commit_to_store(
        &self,
        dir: &std::path::Path,
        per_commit: usize,
        edit_log: Option<journal::EditLog>,
    ) -> Result<journal::Journal, String> {
        let options = journal::JournalOptions {
            edit_log,
            ..journal::JournalOptions::default()
        };
        let (journal, _) =
            journal::Journal::open(dir, options).map_err(|e| format!("opening a store: {e}"))?;
        let mut records = self.records.clone();
        records.sort_by_key(|r| r.transno);
        for group in records.chunks(per_commit) {
            journal
                .commit(group)
                .map_err(|e| format!("committing: {e}"))?;
        }
        Ok(journal)
    }

    /// What `journal` reads back is the live namespace (but the atimes).
    fn compare_store(
        &self,
        journal: &journal::Journal,
        per_commit: usize,
        how: &str,
    ) -> Result<(), String> {
        let records = &self.records;
        let (mut inodes, mut entries, mut xattrs) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        journal
            .scan_namespace(
                |parent, name, entry| {
                    entries.insert((parent, name), entry);
                    Ok(())
                },
                |inode| {
                    inodes.insert(inode.ino, inode);
                    Ok(())
                },
            )
            .and_then(|()| {
                journal.scan_xattrs(|ino, name, value| {
                    xattrs.insert((ino, name), value);
                    Ok(())
                })
            })
            .map_err(|e| format!("reading the store back: {e}"))?;
        let mut live = snapshot(&self.ns);
        // A new store's root is made at its open, with that moment's times, where the
        // harness starts from one made at time 0: the same only once a record images it.
        let root_journaled = records
            .iter()
            .flat_map(|r| &r.ops)
            .any(|op| matches!(op, journal::JournalOp::PutInode(inode) if inode.ino == ROOT_INO));
        if !root_journaled {
            inodes.remove(&ROOT_INO);
            live.0.remove(&ROOT_INO);
        }
        let stored = without_atimes((inodes, entries, xattrs));
        let live = without_atimes(live);
        if stored != live {
            return Err(format!(
                "the store ({how}), {per_commit} records a commit, reads back\n{stored:?}\nnot the live\n{live:?}"
            ));
        }
        Ok(())
    }

    fn failure(&self, step: usize, what: String) -> String {
        format!("step {step}: {what}\nhistory:\n  {}", self.log.join("\n  "))
    }
}

/// One client, commit-on-share off: every answer as the reference's, nothing waits.
fn one_client(steps: &[Step]) -> Result<(), String> {
    let mut h = Harness::new();
    for (i, step) in steps.iter().enumerate() {
        let op = h.model.op(step);
        let checked = h.run(0, op, COS_OFF).and_then(|(_, held)| {
            if held != 0 {
                return Err(format!("commit-on-share is off, yet held by {held}"));
            }
            h.check_against_model()?;
            h.check_invariants()
        });
        checked.map_err(|e| h.failure(i, e))?;
    }
    h.check_replay().map_err(|e| h.failure(steps.len(), e))
}

/// One client's steps, their records then committed to a store `per_commit` to a commit and
/// read back.
fn one_client_stored(steps: &[Step], per_commit: usize) -> Result<(), String> {
    let mut h = Harness::new();
    for (i, step) in steps.iter().enumerate() {
        let op = h.model.op(step);
        h.run(0, op, COS_OFF).map_err(|e| h.failure(i, e))?;
    }
    h.check_store(per_commit)
        .map_err(|e| h.failure(steps.len(), e))
}

/// Two clients, commit-on-share on: every answer as the reference's, and held by exactly
/// the newest uncommitted change of the other client among what it looked at.
fn two_clients(actions: &[Action]) -> Result<(), String> {
    let mut h = Harness::new();
    let mut changes = Changes::default();
    let mut last_committed = 0;
    for (i, action) in actions.iter().enumerate() {
        let (client, step) = match action {
            Action::Commit { keep } => {
                last_committed = last_committed.max(h.model.last_transno.saturating_sub(*keep));
                changes.commit(last_committed);
                h.log
                    .push(format!("commit: last_committed = {last_committed}"));
                continue;
            }
            Action::Run { client, step } => (*client, step),
        };
        let op = h.model.op(step);
        let checked = h.run(client, op, last_committed).and_then(|(fp, held)| {
            let want = changes.holding(&fp.reads, CLIENTS[client], last_committed);
            if held != want {
                return Err(format!(
                    "held by {held}, want {want}: looked at {:?}, changes {:?}",
                    fp.reads, changes.0
                ));
            }
            if let Some(transno) = fp.transno {
                changes.record(&fp.writes, CLIENTS[client], transno);
            }
            h.check_against_model()
        });
        checked.map_err(|e| h.failure(i, e))?;
    }
    h.check_invariants()
        .and_then(|()| h.check_replay())
        .map_err(|e| h.failure(actions.len(), e))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn one_client_answers_as_the_reference(steps in prop::collection::vec(step(), 1..60)) {
        one_client(&steps).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn what_one_client_did_reads_back_from_a_store(
        steps in prop::collection::vec(step(), 1..60),
        per_commit in 1..6usize,
    ) {
        one_client_stored(&steps, per_commit).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn two_clients_wait_for_exactly_the_other_clients_uncommitted_changes(
        actions in prop::collection::vec(action(), 1..60)
    ) {
        two_clients(&actions).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Cases the two-client property found where the server did not do what docs/design.md's
// commit-on-share table says. Each is an answer client B got at once, built on client A's
// change that was not durable: were the server to crash and A not come back, that change
// would be gone and B's answer false — which is what commit-on-share exists to prevent ("no
// other client depended on them"). Each asserts what the design says.

fn as_client(ns: &Namespace, client: u64, last_committed: u64, op: Op) -> Exec {
    let cred = Cred::default();
    let caller = Caller {
        client,
        cred: &cred,
        last_committed,
        reuse_ino: None,
        replay: false,
        atime: mds_proto::Atime::default(),
    };
    ns.execute(op, &caller)
}

fn mkdir(parent: u64, name: &str) -> Op {
    Op::Mkdir {
        parent,
        name: name.into(),
        mode: 0o755,
    }
}

fn rename(src_parent: u64, src_name: &str, dst_parent: u64, dst_name: &str) -> Op {
    Op::Rename {
        src_parent,
        src_name: src_name.into(),
        dst_parent,
        dst_name: dst_name.into(),
        how: RenameHow::Replace,
    }
}

/// The inode a successful CREATE or MKDIR made.
fn made(exec: Exec) -> u64 {
    match exec {
        Exec::Mutation {
            body: Body::Attr(attr),
            ..
        } => attr.ino,
        other => panic!("want a create, got {}", summary(&other)),
    }
}

/// (the answer, what held it) in one comparable value.
fn answered(exec: &Exec) -> (Result<&Body, Errno>, u64) {
    (answer(exec).1, held_by(exec))
}

/// Every operation that names `dir` as a directory, by name. `f` is a file in the root.
fn uses_as_directory(dir: u64) -> Vec<(&'static str, Op)> {
    let name = || String::from("x");
    vec![
        (
            "CREATE in it",
            Op::Create {
                parent: dir,
                name: name(),
                mode: 0o644,
            },
        ),
        ("MKDIR in it", mkdir(dir, "x")),
        (
            "LOOKUP in it",
            Op::Lookup {
                parent: dir,
                name: name(),
            },
        ),
        (
            "READDIR",
            Op::Readdir {
                ino: dir,
                cursor: None,
                limit: 10,
            },
        ),
        (
            "UNLINK in it",
            Op::Unlink {
                parent: dir,
                name: name(),
            },
        ),
        (
            "RMDIR in it",
            Op::Rmdir {
                parent: dir,
                name: name(),
            },
        ),
        ("RENAME out of it", rename(dir, "x", ROOT_INO, "y")),
        ("RENAME into it", rename(ROOT_INO, "f", dir, "f")),
    ]
}

/// A removes directory d (t3, not durable); B, who knew d, asks about it and is told ESTALE.
/// That answer builds on the removal: GETATTR (the table: "the inode") and RENAME into d (the
/// table: "both parents' existence") must wait for it. The server once dropped the inode with
/// its stamp and answered with wait 0; now the stripe keeps the removal's stamp until it is
/// durable (`Locked::note_removed`), as directories keep removed names' (`Node::removed`).
#[test]
fn cos_a_removed_inode_holds_other_clients_until_the_removal_is_durable() {
    let (a, b) = (CLIENTS[0], CLIENTS[1]);
    let ns = empty();
    let d = made(as_client(&ns, a, 0, mkdir(ROOT_INO, "d"))); // t1, made durable below
    let f = Op::Create {
        parent: ROOT_INO,
        name: "f".into(),
        mode: 0o644,
    };
    made(as_client(&ns, b, 0, f)); // t2
    let rmdir = Op::Rmdir {
        parent: ROOT_INO,
        name: "d".into(),
    };
    let Exec::Mutation { transno: t3, .. } = as_client(&ns, a, 2, rmdir) else {
        panic!("rmdir failed");
    };
    let mut ops = uses_as_directory(d);
    ops.push(("GETATTR", Op::Getattr { ino: d }));
    let setattr = Op::Setattr {
        ino: d,
        attr: SetAttr::default(),
    };
    ops.push(("SETATTR", setattr));
    for (what, op) in ops {
        let stale = as_client(&ns, b, 2, op.clone());
        assert_eq!(answered(&stale), (Err(Errno::ESTALE), t3), "{what}");
        let own = as_client(&ns, a, 2, op.clone());
        assert_eq!(answered(&own), (Err(Errno::ESTALE), 0), "{what}: A's own");
        let durable = as_client(&ns, b, t3, op);
        assert_eq!(
            answered(&durable),
            (Err(Errno::ESTALE), 0),
            "{what}: durable"
        );
    }
}

/// A creates file f (t1, not durable); B names f where a directory belongs and is told
/// ENOTDIR. The table says CREATE looks at "parent itself if it was created uncommitted",
/// READDIR at "dir itself". (B has to guess f's number — they are handed out in order.) The
/// server once checked the kind before the stamp and answered with wait 0; now it looks at
/// the inode's stamp before refusing it for its kind.
#[test]
fn cos_a_file_another_client_created_holds_its_use_as_a_directory() {
    let (a, b) = (CLIENTS[0], CLIENTS[1]);
    let ns = empty();
    let create = Op::Create {
        parent: ROOT_INO,
        name: "f".into(),
        mode: 0o644,
    };
    let f = made(as_client(&ns, a, 0, create)); // t1
    for (what, op) in uses_as_directory(f) {
        let refused = as_client(&ns, b, 0, op.clone());
        assert_eq!(answered(&refused), (Err(Errno::ENOTDIR), 1), "{what}");
        let durable = as_client(&ns, b, 1, op);
        assert_eq!(
            answered(&durable),
            (Err(Errno::ENOTDIR), 0),
            "{what}: durable"
        );
    }
}

/// A moves directory y under x (t4, not durable); B renames x into w, which is inside y, and
/// is refused EINVAL. Whether w lies inside x depends on A's move, which none of the objects
/// the table lists for RENAME ("both entries, both parents' existence, the moved inode, the
/// replaced inode") records. The subtree check once walked w's ancestors without looking at
/// their stamps and answered with wait 0; now it looks at the stamp of every directory it
/// passes (a move stamps the moved directory).
#[test]
fn cos_an_uncommitted_move_of_an_ancestor_holds_a_refused_rename() {
    let (a, b) = (CLIENTS[0], CLIENTS[1]);
    let ns = empty();
    let x = made(as_client(&ns, a, 0, mkdir(ROOT_INO, "x"))); // t1
    let y = made(as_client(&ns, a, 0, mkdir(ROOT_INO, "y"))); // t2
    let w = made(as_client(&ns, a, 0, mkdir(y, "w"))); // t3, all durable below
    let Exec::Mutation { transno: t4, .. } = as_client(&ns, a, 3, rename(ROOT_INO, "y", x, "y"))
    else {
        panic!("rename failed");
    };
    let refused = as_client(&ns, b, 3, rename(ROOT_INO, "x", w, "x"));
    assert_eq!(answered(&refused), (Err(Errno::EINVAL), t4));
}

/// The same case the other way round: A moves y out of x/m (t5, not durable); B renames x
/// into w, inside y, and it succeeds, though before A's move it was EINVAL. With `--ack
/// early`, were the server to crash and A not come back, B's replay would be refused: so B's
/// rename is built on A's move (it once said `built_on` 0).
#[test]
fn cos_an_uncommitted_move_of_an_ancestor_holds_an_allowed_rename() {
    let (a, b) = (CLIENTS[0], CLIENTS[1]);
    let ns = empty();
    let x = made(as_client(&ns, a, 0, mkdir(ROOT_INO, "x"))); // t1
    let m = made(as_client(&ns, a, 0, mkdir(x, "m"))); // t2
    let y = made(as_client(&ns, a, 0, mkdir(m, "y"))); // t3
    let w = made(as_client(&ns, a, 0, mkdir(y, "w"))); // t4, all durable below
    let Exec::Mutation { transno: t5, .. } = as_client(&ns, a, 4, rename(m, "y", ROOT_INO, "y"))
    else {
        panic!("rename failed");
    };
    let moved = as_client(&ns, b, 4, rename(ROOT_INO, "x", w, "x"));
    let Exec::Mutation { built_on, .. } = moved else {
        panic!("want the rename done, got {}", summary(&moved));
    };
    assert_eq!(built_on, t5);
}
