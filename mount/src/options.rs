//! The command line: `mdsmount SERVER MOUNTPOINT [-o opt,...] [-f]`, in the shape of
//! `mfsmount` and `ceph-fuse` and of what `mount.fuse3` runs for an `/etc/fstab` line of type
//! `fuse.mdsmount` (it passes the line's options after `-o`, and appends `dev` and `suid`
//! unless the line says `nodev` and `nosuid`). Every `-o` option is parsed and checked here,
//! before anything is mounted; an unknown one is refused with its name.
//!
//! The mount is `nosuid,nodev` unless `suid` or `dev` is asked for: whoever may claim a uid
//! to the server may make files owned by it, so a set-user-ID program or a device node on the
//! mount must not take effect on this host unless the administrator says so.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use fuser::MountOption;
use mds_client::proto::{AckAsked, Atime};
use mds_client::units::parse_duration;

#[derive(Parser, Debug)]
#[command(
    name = "mdsmount",
    version,
    about = "Mount an mds server's namespace over FUSE",
    after_help = "Options (-o, comma-separated, repeatable): ro, rw, allow_other, allow_root, \
                  default_permissions, attr_timeout=SECS, entry_timeout=SECS (both 1 by \
                  default; 0 for strict coherence between clients), reconnect_timeout=SECS \
                  (300; 0: forever), ack=early|commit|server (early: changes answered at once, \
                  durable with the next commit; commit: once durable; server: as its --ack \
                  says), read_ahead_kb=KIB (1024; 0: the kernel's 128), auth_key=FILE, tls_ca=FILE, tls_server_name=NAME, \
                  log_file=FILE, fsname=NAME, and the kernel's dev, nodev, suid, nosuid, exec, \
                  noexec, atime, noatime, sync, async, dirsync (nosuid and nodev unless suid \
                  or dev is given); relatime (the default), noatime, strictatime decide how \
                  reads move atimes on the server. fstab: `HOST:PORT /mnt fuse.mdsmount \
                  nosuid,nodev,allow_other,_netdev 0 0` (docs/mount.md: mount.fuse3 adds dev \
                  and suid to a line that does not say nodev and nosuid).\n\n\
                  Exit status: 0 mounted (in the background unless -f; with -f, unmounted \
                  cleanly), 1 the mount failed, 2 bad usage."
)]
pub struct Cli {
    /// The server, HOST:PORT (`mdsmount#HOST:PORT`, the device of an fstab line of type
    /// `fuse`, is taken too).
    pub server: String,
    /// An existing directory to mount on.
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated (see below).
    #[arg(short = 'o', value_name = "OPT[,OPT...]")]
    pub options: Vec<String>,
    /// Stay in the foreground, logging to stderr; SIGINT or SIGTERM unmounts.
    #[arg(short, long)]
    pub foreground: bool,
    /// The shared key file, for a server started with --auth-key.
    #[arg(long, env = "MDS_AUTH_KEY")]
    pub auth_key: Option<PathBuf>,
    /// Speak TLS, trusting the certificates in this PEM file.
    #[arg(long, env = "MDS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// The name the server's certificate must carry. Default: the host part of SERVER.
    #[arg(long, env = "MDS_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
    /// Where the mount logs in the background (appended). Default: stderr, unless it is a
    /// terminal (then nowhere). `MDSMOUNT_LOG` (or `RUST_LOG`) sets the filter, `info`.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// The background process itself: reports on stdout that the mount is up.
    #[arg(long, hide = true)]
    pub daemon_child: bool,
}

/// Everything the mount runs with, checked.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug)]
pub struct Settings {
    pub server: String,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    pub read_only: bool,
    pub allow_other: bool,
    pub allow_root: bool,
    pub default_permissions: bool,
    pub attr_timeout: Duration,
    pub entry_timeout: Duration,
    pub reconnect_timeout: Duration,
    pub auth_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub tls_server_name: Option<String>,
    pub log_file: Option<PathBuf>,
    pub fsname: Option<String>,
    /// The kernel's own mount flags, passed through.
    pub kernel_flags: Vec<MountOption>,
    /// When the server answers the mount's changes (`ack=`): at once by default, durable
    /// with the next commit and replayed by the mount after a restart.
    pub ack: AckAsked,
    /// The kernel's readahead for the mount, KiB (`read_ahead_kb`; None: the kernel's own).
    pub read_ahead_kb: Option<u32>,
    /// How reads through the mount move atimes (`relatime`, `noatime`, `strictatime`; the
    /// server moves them, told at CONNECT).
    pub atime: Atime,
}

/// The readahead asked of the kernel for a mount: one FUSE READ of the largest size the mount
/// takes (256 pages), instead of the 128 KiB the kernel gives every FUSE mount — 8 requests a
/// MiB fewer for a sequential reader. The kernel has no FUSE request for it: the mount writes
/// it to its device's `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`, which root may.
pub const DEFAULT_READ_AHEAD_KB: u32 = 1024;

/// Options `mount(8)` and `mount.fuse3` may pass that mean nothing to the mount itself.
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "owner",
    "nofail",
    "_netdev",
    "lazytime",
    "nolazytime",
    "nodiratime",
    "diratime",
];

impl Settings {
    pub fn from_cli(cli: Cli) -> Result<Settings, String> {
        let server = cli
            .server
            .strip_prefix("mdsmount#")
            .unwrap_or(&cli.server)
            .to_owned();
        if !server.contains(':') {
            return Err(format!("SERVER {server:?}: expected HOST:PORT"));
        }
        let mut s = Settings {
            server,
            mountpoint: cli.mountpoint,
            foreground: cli.foreground || cli.daemon_child,
            read_only: false,
            allow_other: false,
            allow_root: false,
            default_permissions: false,
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            reconnect_timeout: Duration::from_secs(300),
            read_ahead_kb: Some(DEFAULT_READ_AHEAD_KB),
            ack: AckAsked::Early,
            auth_key: cli.auth_key,
            tls_ca: cli.tls_ca,
            tls_server_name: cli.tls_server_name,
            log_file: cli.log_file,
            fsname: None,
            kernel_flags: Vec::new(),
            atime: Atime::Relatime,
        };
        for option in cli.options.iter().flat_map(|o| o.split(',')) {
            s.take(option.trim())?;
        }
        if s.tls_server_name.is_some() && s.tls_ca.is_none() {
            return Err("tls_server_name needs tls_ca".into());
        }
        if !s.mountpoint.is_dir() {
            return Err(format!(
                "mount point {}: not a directory",
                s.mountpoint.display()
            ));
        }
        Ok(s)
    }

    /// One `-o` option.
    fn take(&mut self, option: &str) -> Result<(), String> {
        let (key, value) = match option.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (option, None),
        };
        let text = || -> Result<String, String> {
            value
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("option {key} needs a value ({key}=...)"))
        };
        let path = || text().map(PathBuf::from);
        let seconds = || -> Result<Duration, String> {
            let v = value.ok_or_else(|| format!("option {key} needs a value ({key}=SECS)"))?;
            parse_duration(v).map_err(|e| format!("option {key}: {e}"))
        };
        let flag = match key {
            "" => return Ok(()),
            "ro" => Some(MountOption::RO),
            "rw" => Some(MountOption::RW),
            "dev" => Some(MountOption::Dev),
            "nodev" => Some(MountOption::NoDev),
            "suid" => Some(MountOption::Suid),
            "nosuid" => Some(MountOption::NoSuid),
            "exec" => Some(MountOption::Exec),
            "noexec" => Some(MountOption::NoExec),
            "atime" => Some(MountOption::Atime),
            "noatime" => Some(MountOption::NoAtime),
            "sync" => Some(MountOption::Sync),
            "async" => Some(MountOption::Async),
            "dirsync" => Some(MountOption::DirSync),
            _ => None,
        };
        if let Some(flag) = flag {
            if value.is_some() {
                return Err(format!("option {key} takes no value"));
            }
            match flag {
                MountOption::RO => self.read_only = true,
                MountOption::RW => self.read_only = false,
                MountOption::NoAtime => self.atime = Atime::Noatime,
                // `atime` undoes `noatime`: Linux's default, relatime.
                MountOption::Atime => self.atime = Atime::Relatime,
                _ => {}
            }
            // The last of two opposites wins, as in mount(8).
            self.kernel_flags.retain(|f| !opposite(f, &flag));
            self.kernel_flags.push(flag);
            return Ok(());
        }
        match key {
            "relatime" | "strictatime" if value.is_some() => {
                return Err(format!("option {key} takes no value"));
            }
            "relatime" => self.atime = Atime::Relatime,
            "strictatime" => self.atime = Atime::Strictatime,
            "allow_other" => self.allow_other = true,
            "allow_root" => self.allow_root = true,
            "default_permissions" => self.default_permissions = true,
            "attr_timeout" => self.attr_timeout = seconds()?,
            "entry_timeout" => self.entry_timeout = seconds()?,
            "reconnect_timeout" => {
                let t = seconds()?;
                self.reconnect_timeout = if t.is_zero() { Duration::MAX } else { t };
            }
            "ack" => {
                self.ack = match text()?.as_str() {
                    "early" => AckAsked::Early,
                    "commit" => AckAsked::Commit,
                    "server" => AckAsked::Server,
                    other => {
                        return Err(format!(
                            "option ack: {other:?} is not early, commit or server"
                        ));
                    }
                }
            }
            "read_ahead_kb" => {
                let kb = text()?
                    .parse::<u32>()
                    .map_err(|e| format!("option read_ahead_kb: {e}"))?;
                self.read_ahead_kb = (kb > 0).then_some(kb);
            }
            "auth_key" => self.auth_key = Some(path()?),
            "tls_ca" => self.tls_ca = Some(path()?),
            "tls_server_name" => self.tls_server_name = Some(text()?),
            "log_file" => self.log_file = Some(path()?),
            "fsname" => self.fsname = Some(text()?),
            k if IGNORED.contains(&k) || k.starts_with("x-") || k.starts_with("comment=") => {}
            _ => return Err(format!("unknown mount option {option:?} (mdsmount --help)")),
        }
        Ok(())
    }

    /// The mount options fuser is given: the kernel's flags, permissions, and the name and
    /// type `/proc/mounts` shows (`SERVER /mnt fuse.mdsmount`).
    pub fn fuse_config(&self) -> fuser::Config {
        let mut options = vec![
            MountOption::FSName(self.fsname.clone().unwrap_or_else(|| self.server.clone())),
            // The kernel takes `subtype=` itself (as root) and fusermount3 too.
            MountOption::CUSTOM("subtype=mdsmount".into()),
        ];
        if self.default_permissions {
            options.push(MountOption::DefaultPermissions);
        }
        options.extend(self.kernel_flags.iter().cloned());
        // Set-user-ID programs and device nodes take no effect unless asked for, whichever
        // way the mount is made (fuser's mount(2) and fusermount3 default to these too, but
        // the mount should not rest on their defaults).
        for (on, off) in [
            (MountOption::Suid, MountOption::NoSuid),
            (MountOption::Dev, MountOption::NoDev),
        ] {
            if !self.kernel_flags.contains(&on) && !self.kernel_flags.contains(&off) {
                options.push(off);
            }
        }
        let mut config = fuser::Config::default();
        config.mount_options = options;
        config.acl = if self.allow_other {
            fuser::SessionACL::All
        } else if self.allow_root {
            fuser::SessionACL::RootAndOwner
        } else {
            fuser::SessionACL::Owner
        };
        // One thread reads /dev/fuse; the work is on the runtime.
        config.n_threads = Some(1);
        config
    }

    /// What the log says when the mount lets set-user-ID programs or device nodes take
    /// effect: anyone the server lets claim uid 0 can then make a program that runs as root
    /// here. `None` for a `nosuid,nodev` mount.
    pub fn set_id_warning(&self) -> Option<&'static str> {
        let suid = self.kernel_flags.contains(&MountOption::Suid);
        let dev = self.kernel_flags.contains(&MountOption::Dev);
        (suid || dev).then_some(
            "this mount honours set-user-ID programs or device nodes (suid, dev): whoever the \
             server lets act as root can run programs as root or reach devices here; an fstab \
             line gets both from mount.fuse3 unless it says nosuid,nodev",
        )
    }
}

fn opposite(a: &MountOption, b: &MountOption) -> bool {
    use MountOption::{
        Async, Atime, Dev, Exec, NoAtime, NoDev, NoExec, NoSuid, RO, RW, Suid, Sync,
    };
    matches!(
        (a, b),
        (RO, RW)
            | (RW, RO)
            | (Dev, NoDev)
            | (NoDev, Dev)
            | (Suid, NoSuid)
            | (NoSuid, Suid)
            | (Exec, NoExec)
            | (NoExec, Exec)
            | (Atime, NoAtime)
            | (NoAtime, Atime)
            | (Sync, Async)
            | (Async, Sync)
    ) || a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Result<Settings, String> {
        let dir = std::env::temp_dir();
        let dir = dir.to_str().unwrap();
        let argv = ["mdsmount", "127.0.0.1:7400", dir]
            .into_iter()
            .chain(args.iter().copied());
        Settings::from_cli(Cli::try_parse_from(argv).map_err(|e| e.to_string())?)
    }

    #[test]
    fn options_parse_as_mount_fuse3_passes_them() {
        let s = settings(&["-o", "rw,allow_other,attr_timeout=0,dev,suid", "-o", "ro"]).unwrap();
        assert!(s.read_only && s.allow_other && !s.default_permissions);
        assert_eq!(s.attr_timeout, Duration::ZERO);
        assert_eq!(s.entry_timeout, Duration::from_secs(1));
        assert_eq!(
            s.kernel_flags,
            [MountOption::Dev, MountOption::Suid, MountOption::RO],
            "the later ro replaces rw"
        );
        let s = settings(&["-oentry_timeout=0.25,default_permissions,_netdev,defaults"]).unwrap();
        assert_eq!(s.entry_timeout, Duration::from_millis(250));
        assert!(s.default_permissions);
        assert_eq!(s.read_ahead_kb, Some(DEFAULT_READ_AHEAD_KB));
        assert_eq!(s.ack, AckAsked::Early, "answered at once unless told");
        for (word, ack) in [
            ("commit", AckAsked::Commit),
            ("server", AckAsked::Server),
            ("early", AckAsked::Early),
        ] {
            assert_eq!(settings(&["-o", &format!("ack={word}")]).unwrap().ack, ack);
        }
        assert!(settings(&["-o", "ack=soon"]).unwrap_err().contains("ack"));
        assert!(settings(&["-o", "ack"]).is_err());
        let s = settings(&["-o", "read_ahead_kb=4096"]).unwrap();
        assert_eq!(s.read_ahead_kb, Some(4096));
        let s = settings(&["-o", "read_ahead_kb=0"]).unwrap();
        assert_eq!(s.read_ahead_kb, None, "0 leaves the kernel's own");
        assert!(settings(&["-o", "read_ahead_kb=lots"]).is_err());
        assert!(settings(&["-o", "read_ahead_kb"]).is_err());
        let s = settings(&["-o", "reconnect_timeout=0,auth_key=/k"]).unwrap();
        assert_eq!(s.reconnect_timeout, Duration::MAX);
        assert_eq!(s.auth_key, Some(PathBuf::from("/k")));
    }

    #[test]
    fn atime_options_say_how_the_server_moves_atimes_and_the_last_wins() {
        assert_eq!(settings(&[]).unwrap().atime, Atime::Relatime);
        let s = settings(&["-o", "noatime"]).unwrap();
        assert_eq!(s.atime, Atime::Noatime);
        assert_eq!(
            s.kernel_flags,
            [MountOption::NoAtime],
            "the kernel's flag too"
        );
        assert_eq!(
            settings(&["-o", "strictatime"]).unwrap().atime,
            Atime::Strictatime
        );
        assert_eq!(
            settings(&["-o", "noatime,relatime"]).unwrap().atime,
            Atime::Relatime
        );
        assert_eq!(
            settings(&["-o", "noatime,atime"]).unwrap().atime,
            Atime::Relatime
        );
        assert_eq!(
            settings(&["-o", "strictatime,noatime"]).unwrap().atime,
            Atime::Noatime
        );
        let refused = settings(&["-o", "strictatime=1"]).unwrap_err();
        assert!(refused.contains("strictatime takes no value"), "{refused}");
    }

    /// Issue 53, finding 3: a mount that honours set-user-ID programs and device nodes lets
    /// whoever the server believes as root run programs as root on this host, so neither is
    /// honoured unless asked for by name.
    #[test]
    fn the_mount_is_nosuid_and_nodev_unless_suid_or_dev_is_asked_for() {
        use MountOption::{Dev, NoDev, NoSuid, Suid};
        let mounted_with = |args: &[&str]| {
            let s = settings(args).unwrap();
            let flags: Vec<MountOption> = s
                .fuse_config()
                .mount_options
                .into_iter()
                .filter(|f| matches!(f, Dev | NoDev | Suid | NoSuid))
                .collect();
            (flags, s.set_id_warning().is_some())
        };
        assert_eq!(
            mounted_with(&[]),
            (vec![NoSuid, NoDev], false),
            "the default"
        );
        assert_eq!(
            mounted_with(&["-o", "allow_other,_netdev"]),
            (vec![NoSuid, NoDev], false),
            "options that say nothing of either"
        );
        assert_eq!(
            mounted_with(&["-o", "suid,dev"]),
            (vec![Suid, Dev], true),
            "asked for explicitly"
        );
        assert_eq!(mounted_with(&["-o", "suid"]), (vec![Suid, NoDev], true));
        // The fstab line docs/mount.md gives: mount.fuse3 appends neither dev nor suid to it.
        assert_eq!(
            mounted_with(&["-o", "rw,nosuid,nodev,allow_other,_netdev"]),
            (vec![NoSuid, NoDev], false)
        );
        // The same line without them, as mount.fuse3 passes it: it appended dev and suid.
        assert_eq!(
            mounted_with(&["-o", "rw,allow_other,_netdev,dev,suid"]),
            (vec![Dev, Suid], true)
        );
    }

    #[test]
    fn bad_options_are_refused_with_their_name() {
        let unknown = settings(&["-o", "ro,bogus"]).unwrap_err();
        assert!(unknown.contains("bogus"), "{unknown}");
        assert!(
            settings(&["-o", "attr_timeout"])
                .unwrap_err()
                .contains("attr_timeout")
        );
        assert!(settings(&["-o", "attr_timeout=soon"]).is_err());
        assert!(settings(&["-o", "ro=1"]).is_err());
        assert!(
            settings(&["-o", "tls_server_name=x"])
                .unwrap_err()
                .contains("tls_ca")
        );
    }

    #[test]
    fn the_fstab_device_form_and_the_fuse_options() {
        let dir = std::env::temp_dir();
        let argv = ["mdsmount", "mdsmount#10.0.0.1:7400", dir.to_str().unwrap()];
        let s = Settings::from_cli(Cli::try_parse_from(argv).unwrap()).unwrap();
        assert_eq!(s.server, "10.0.0.1:7400");
        let config = s.fuse_config();
        assert!(
            config
                .mount_options
                .contains(&MountOption::FSName("10.0.0.1:7400".into()))
        );
        assert_eq!(config.acl, fuser::SessionACL::Owner);
        let argv = ["mdsmount", "nohost", dir.to_str().unwrap()];
        assert!(Settings::from_cli(Cli::try_parse_from(argv).unwrap()).is_err());
    }
}
