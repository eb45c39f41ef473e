//! What each request is: the operation kinds, the `--mix` weights, and the names a lane works
//! on. A lane is one request slot (`--depth` lanes per thread); it owns the names it creates,
//! so `stat`, `lookup`, `unlink`, `link` and `setxattr` in a mix touch files the same lane
//! made (and `symlink` points at one of them). A `write` is several requests counted as one
//! operation: it makes a new file and fills it (`run/files.rs`).

use std::fmt;

use anyhow::{Context, bail};

/// One kind of operation loadgen issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Create,
    Mkdir,
    Stat,
    Lookup,
    Unlink,
    Readdir,
    /// A hard link, in the lane's directory, to a file of its working set.
    Link,
    /// A symbolic link in the lane's directory to the name of a file of its working set.
    Symlink,
    /// `user.loadgen` (`--xattr-size` bytes) set on a file of the working set.
    Setxattr,
    /// A new file, opened, written with `--size` bytes and released (with `--read-back`,
    /// read back and checked before the release): one operation, several requests.
    Write,
}

/// The extended attribute `setxattr` sets: in the `user.` namespace, which regular files
/// take from their owner with no privilege.
pub const XATTR_NAME: &str = "user.loadgen";

/// `--xattr-size`'s default: a small value, as a tag or a checksum would be.
pub const DEFAULT_XATTR_SIZE: u32 = 16;

/// `--size`'s default: one page, the small file a write-then-read benchmark is made of.
pub const DEFAULT_WRITE_SIZE: u64 = 4096;

/// What a `symlink` points at when its lane has no file to name: a name nothing here makes
/// (a dangling link is as good a SYMLINK as any).
pub const FALLBACK_TARGET: &str = "loadgen.target";

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Create,
        Kind::Mkdir,
        Kind::Stat,
        Kind::Lookup,
        Kind::Unlink,
        Kind::Readdir,
        Kind::Link,
        Kind::Symlink,
        Kind::Setxattr,
        Kind::Write,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Mkdir => "mkdir",
            Kind::Stat => "stat",
            Kind::Lookup => "lookup",
            Kind::Unlink => "unlink",
            Kind::Readdir => "readdir",
            Kind::Link => "link",
            Kind::Symlink => "symlink",
            Kind::Setxattr => "setxattr",
            Kind::Write => "write",
        }
    }

    /// The plural used in the Rate line ("creates", "stats", …).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Create => "creates",
            Kind::Mkdir => "mkdirs",
            Kind::Stat => "stats",
            Kind::Lookup => "lookups",
            Kind::Unlink => "unlinks",
            Kind::Readdir => "readdirs",
            Kind::Link => "links",
            Kind::Symlink => "symlinks",
            Kind::Setxattr => "setxattrs",
            Kind::Write => "writes",
        }
    }

    /// Whether the kind works on a file the lane already has (its working set). `symlink`
    /// does not: it names one of those files if there is one, but it makes something new
    /// whether or not there is.
    pub fn works_on_names(self) -> bool {
        matches!(
            self,
            Kind::Stat | Kind::Lookup | Kind::Unlink | Kind::Link | Kind::Setxattr
        )
    }

    /// Whether the kind makes a new name in the lane's directory whatever the lane holds: a
    /// run of these needs no files to start from.
    pub fn makes_names(self) -> bool {
        matches!(
            self,
            Kind::Create | Kind::Mkdir | Kind::Symlink | Kind::Write
        )
    }

    /// Whether the kind makes a regular file, which the ack log lists and the working set
    /// may keep.
    pub fn makes_files(self) -> bool {
        matches!(self, Kind::Create | Kind::Write)
    }

    fn parse(s: &str) -> anyhow::Result<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .with_context(|| format!("unknown operation {s:?} in --mix"))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Weighted operation kinds, e.g. `create=60,stat=30,unlink=10`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    /// (kind, cumulative weight), in the order given.
    steps: Vec<(Kind, u32)>,
    total: u32,
}

impl Mix {
    pub fn parse(spec: &str) -> anyhow::Result<Mix> {
        let mut steps = Vec::new();
        let mut total = 0u32;
        for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .with_context(|| format!("--mix entry {part:?} is not NAME=WEIGHT"))?;
            let kind = Kind::parse(name.trim())?;
            let weight: u32 = weight
                .trim()
                .parse()
                .with_context(|| format!("--mix weight {weight:?} is not a number"))?;
            if steps.iter().any(|(k, _)| *k == kind) {
                bail!("--mix names {kind} twice");
            }
            if weight > 0 {
                total += weight;
                steps.push((kind, total));
            }
        }
        if total == 0 {
            bail!("--mix needs at least one positive weight (e.g. create=60,stat=30,unlink=10)");
        }
        Ok(Mix { steps, total })
    }

    /// A mix of one kind.
    pub fn single(kind: Kind) -> Mix {
        Mix {
            steps: vec![(kind, 1)],
            total: 1,
        }
    }

    /// Picks a kind for the random number `r`.
    pub fn pick(&self, r: u64) -> Kind {
        let x = (r % u64::from(self.total)) as u32;
        self.steps
            .iter()
            .find(|(_, cum)| x < *cum)
            .map(|(k, _)| *k)
            .expect("x is below the total")
    }

    pub fn kinds(&self) -> impl Iterator<Item = Kind> + '_ {
        self.steps.iter().map(|(k, _)| *k)
    }

    /// The spec in canonical form, for the report.
    pub fn spec(&self) -> String {
        let mut prev = 0;
        self.steps
            .iter()
            .map(|(k, cum)| {
                let w = cum - prev;
                prev = *cum;
                format!("{k}={w}")
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The files a lane may stat, look up, unlink, link to or set attributes on (and that its
/// symlinks point at): those it found at the start, and those it creates if its mix works on
/// names at all. Links and symlinks never join it. A create-only run keeps none of its names: it
/// used to keep every one, ~90 bytes per create for as long as it ran (199 MB after 12 s at
/// 64 x 16, so ~10 GB in ten minutes), and grew the list by copying it.
pub struct WorkingSet {
    names: Vec<(String, u64)>,
    /// Next index into `names` for stat/lookup cycling.
    cursor: usize,
    keep_created: bool,
}

impl WorkingSet {
    pub fn new(names: Vec<(String, u64)>, mix: &Mix) -> WorkingSet {
        WorkingSet {
            names,
            cursor: 0,
            keep_created: mix.kinds().any(Kind::works_on_names),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the files the lane creates join the set.
    pub fn keeps_created(&self) -> bool {
        self.keep_created
    }

    /// The next file to stat or look up: each in turn.
    pub fn next_in_turn(&mut self) -> Option<&(String, u64)> {
        if self.names.is_empty() {
            return None;
        }
        let i = self.cursor % self.names.len();
        self.cursor += 1;
        Some(&self.names[i])
    }

    /// The file picked by the random number `r`, left in the set (a symlink's target).
    pub fn any(&self, r: u64) -> Option<&(String, u64)> {
        if self.names.is_empty() {
            return None;
        }
        Some(&self.names[(r % self.names.len() as u64) as usize])
    }

    /// Takes out the file picked by the random number `r` (to unlink it).
    pub fn take(&mut self, r: u64) -> Option<(String, u64)> {
        if self.names.is_empty() {
            return None;
        }
        let i = (r % self.names.len() as u64) as usize;
        Some(self.names.swap_remove(i))
    }

    /// A file the lane created.
    pub fn created(&mut self, name: String, ino: u64) {
        if self.keep_created {
            self.names.push((name, ino));
        }
    }
}

/// xorshift64*: a lane's cheap, reproducible random numbers.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_pick_by_weight_and_refuse_nonsense() {
        let mix = Mix::parse("create=60,stat=30,unlink=10").unwrap();
        assert_eq!(mix.spec(), "create=60,stat=30,unlink=10");
        let mut counts = std::collections::HashMap::new();
        let mut rng = Rng::new(1);
        for _ in 0..100_000 {
            *counts.entry(mix.pick(rng.next())).or_insert(0) += 1;
        }
        let create = f64::from(counts[&Kind::Create]) / 100_000.0;
        assert!((0.57..0.63).contains(&create), "{create}");
        assert!(!counts.contains_key(&Kind::Mkdir));
        for bad in [
            "",
            "create",
            "create=x",
            "fly=1",
            "create=0",
            "stat=1,stat=2",
        ] {
            assert!(Mix::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Mix::single(Kind::Stat).pick(12345), Kind::Stat);
    }

    #[test]
    fn links_symlinks_and_setxattrs_parse_and_pick_by_weight() {
        let mix = Mix::parse("create=50, link=20,symlink=15 ,setxattr=15").unwrap();
        assert_eq!(mix.spec(), "create=50,link=20,symlink=15,setxattr=15");
        assert_eq!(
            mix.kinds().collect::<Vec<_>>(),
            [Kind::Create, Kind::Link, Kind::Symlink, Kind::Setxattr]
        );
        let mut counts = std::collections::HashMap::new();
        let mut rng = Rng::new(7);
        for _ in 0..100_000 {
            *counts.entry(mix.pick(rng.next())).or_insert(0u32) += 1;
        }
        for (kind, share) in [
            (Kind::Create, 0.50),
            (Kind::Link, 0.20),
            (Kind::Symlink, 0.15),
            (Kind::Setxattr, 0.15),
        ] {
            let seen = f64::from(counts[&kind]) / 100_000.0;
            assert!((seen - share).abs() < 0.02, "{kind}: {seen}");
        }
        assert_eq!(counts.len(), 4);

        // Each has its own name, plural (the Rate line's word) and serde name.
        for (kind, name, plural) in [
            (Kind::Link, "link", "links"),
            (Kind::Symlink, "symlink", "symlinks"),
            (Kind::Setxattr, "setxattr", "setxattrs"),
        ] {
            assert_eq!(Kind::parse(name).unwrap(), kind);
            assert_eq!((kind.name(), kind.plural()), (name, plural));
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(name));
            assert_eq!(
                Mix::parse(&format!("{name}=3")).unwrap().spec(),
                format!("{name}=3")
            );
            assert!(Kind::ALL.contains(&kind));
        }
        // Link and setxattr work on the lane's files; a symlink makes a name as create does.
        assert!(Kind::Link.works_on_names() && Kind::Setxattr.works_on_names());
        assert!(!Kind::Symlink.works_on_names() && Kind::Symlink.makes_names());
        assert!(!Kind::Link.makes_names() && !Kind::Setxattr.makes_names());
        for bad in [
            "links=1",
            "hardlink=1",
            "link=1,link=1",
            "setxattr=-1",
            "symlink",
        ] {
            assert!(Mix::parse(bad).is_err(), "{bad:?}");
        }
        // Every name is distinct, and the plurals too.
        let names: std::collections::BTreeSet<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        let plurals: std::collections::BTreeSet<_> = Kind::ALL.iter().map(|k| k.plural()).collect();
        assert_eq!(
            (names.len(), plurals.len()),
            (Kind::ALL.len(), Kind::ALL.len())
        );
    }

    #[test]
    fn writes_parse_make_files_and_need_none_to_start_from() {
        let mix = Mix::parse("create=1,write=3").unwrap();
        assert_eq!(mix.spec(), "create=1,write=3");
        assert_eq!(mix.kinds().collect::<Vec<_>>(), [Kind::Create, Kind::Write]);
        assert_eq!(Kind::parse("write").unwrap(), Kind::Write);
        assert_eq!(
            (Kind::Write.name(), Kind::Write.plural()),
            ("write", "writes")
        );
        assert_eq!(
            serde_json::to_value(Kind::Write).unwrap(),
            serde_json::json!("write")
        );
        assert!(Kind::Write.makes_names() && Kind::Write.makes_files());
        assert!(!Kind::Write.works_on_names());
        assert!(Kind::Create.makes_files() && !Kind::Mkdir.makes_files());
        assert!(!Kind::Symlink.makes_files() && !Kind::Link.makes_files());
        // A write's file joins the set when the mix works on names, as a create's does.
        let mut set = WorkingSet::new(Vec::new(), &Mix::parse("write=1,stat=1").unwrap());
        assert!(set.keeps_created());
        set.created("w".into(), 5);
        assert_eq!(set.next_in_turn(), Some(&("w".to_owned(), 5)));
        assert!(!WorkingSet::new(Vec::new(), &Mix::single(Kind::Write)).keeps_created());
        for bad in ["writes=1", "write=1,write=2", "write"] {
            assert!(Mix::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn links_and_setxattrs_keep_what_the_lane_creates_symlinks_alone_do_not() {
        for spec in ["create=1,link=1", "create=1,setxattr=1"] {
            let mut set = WorkingSet::new(Vec::new(), &Mix::parse(spec).unwrap());
            assert!(set.keeps_created(), "{spec}");
            set.created("c".into(), 12);
            assert_eq!(set.any(99), Some(&("c".to_owned(), 12)));
        }
        let symlinks = WorkingSet::new(Vec::new(), &Mix::parse("create=1,symlink=1").unwrap());
        assert!(!symlinks.keeps_created());
        assert_eq!(symlinks.any(3), None);

        // `any` leaves the file in the set.
        let found = vec![("a".to_owned(), 10), ("b".to_owned(), 11)];
        let set = WorkingSet::new(found, &Mix::single(Kind::Link));
        assert_eq!(set.any(3), Some(&("b".to_owned(), 11)));
        assert_eq!(set.any(4), Some(&("a".to_owned(), 10)));
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn a_lane_keeps_what_it_creates_only_when_its_mix_works_on_names() {
        let found = vec![("a".to_owned(), 10), ("b".to_owned(), 11)];
        let mut creates_only = WorkingSet::new(Vec::new(), &Mix::single(Kind::Create));
        assert!(!creates_only.keeps_created());
        creates_only.created("c".into(), 12);
        assert!(creates_only.is_empty());
        assert_eq!(creates_only.next_in_turn(), None);
        assert_eq!(creates_only.take(7), None);

        // Readdir reads the directory, not the set: it keeps nothing either.
        let listing = Mix::parse("create=1,readdir=1").unwrap();
        assert!(!WorkingSet::new(Vec::new(), &listing).keeps_created());

        let mut mixed = WorkingSet::new(found, &Mix::parse("create=2,stat=1").unwrap());
        mixed.created("c".into(), 12);
        assert_eq!(mixed.len(), 3);
        let turns: Vec<u64> = (0..4).map(|_| mixed.next_in_turn().unwrap().1).collect();
        assert_eq!(turns, [10, 11, 12, 10]);
        assert_eq!(mixed.take(4), Some(("b".to_owned(), 11)));
        assert_eq!(mixed.len(), 2);
    }
}
