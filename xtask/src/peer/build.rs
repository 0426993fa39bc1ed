//! `cargo xtask peer build`: the peer's kernel, fio, busybox and initramfs in the cache
//! directory, each step skipped when its result is there.
//!
//! ```text
//! DIR/debs/                      the downloaded .deb files (kernel, busybox-static)
//! DIR/kernel/                    the kernel package unpacked; lib/modules/KV/ with depmod's files
//! DIR/fio/                       a private apt state (deb-src list, lists) and fio's source
//! DIR/bin/fio, DIR/bin/busybox   the static programs of the guest
//! DIR/initrd.cpio.gz             the initramfs; DIR/initrd.key says what it was built from
//! DIR/results/                   what `peer run` wrote
//! ```
//!
//! The binary packages come from the machine's own apt (its lists, its mirror); fio's source
//! comes from the same mirror through a private deb-src list, so the machine's apt
//! configuration is not touched.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::cpio::Archive;

/// The guest's `/init`.
pub const GUEST_INIT: &str = include_str!("../../peer/guest/init");

/// The Debian source package of fio and its version (Debian 12's).
const FIO_SOURCE: &str = "fio=3.33-3";
const FIO_VERSION: &str = "fio-3.33";

/// fio's `configure` options: a static binary with the optional engines that need more
/// libraries (and none of which the peer uses) left out.
const FIO_CONFIGURE: &[&str] = &[
    "--build-static",
    "--disable-native",
    "--disable-numa",
    "--disable-rdma",
    "--disable-rados",
    "--disable-rbd",
    "--disable-gfapi",
    "--disable-pmem",
    "--disable-http",
    "--disable-libnfs",
    "--disable-libzbc",
    "--disable-xnvme",
    "--disable-dfs",
    "--disable-tcmalloc",
    "--disable-shm",
];

/// The drivers the guest loads; modprobe resolves each one's dependencies (and soft
/// dependencies) at build time, in this order.
pub const MODULES: &[&str] = &["megaraid_sas", "sd_mod", "null_blk", "nvme"];

/// Changes whenever the initramfs's layout changes, so an old one is rebuilt.
const LAYOUT_VERSION: &str = "peer-initramfs-1";

/// What the guest needs, ready to boot.
#[derive(Debug, Clone)]
pub struct Built {
    pub dir: PathBuf,
    pub kernel_version: String,
    /// The compressed kernel (`kernel/boot/vmlinuz-KV`).
    pub kernel_image: PathBuf,
    pub initrd: PathBuf,
}

impl Built {
    pub fn results_dir(&self) -> PathBuf {
        self.dir.join("results")
    }
}

/// The steps of a build; each is skipped when its result is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Kernel,
    Busybox,
    Fio,
    Initramfs,
}

impl Step {
    /// The Debian packages a step runs programs of (`dpkg` and `apt` are taken as given).
    fn packages(self) -> &'static [&'static str] {
        match self {
            Step::Kernel => &["kmod"],
            Step::Busybox => &[],
            Step::Fio => &[
                "gcc",
                "make",
                "patch",
                "xz-utils",
                "binutils",
                "libaio-dev",
                "zlib1g-dev",
            ],
            Step::Initramfs => &["kmod", "gzip"],
        }
    }
}

/// Paths of the cache directory.
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn debs(&self) -> PathBuf {
        self.dir.join("debs")
    }
    fn kernel(&self) -> PathBuf {
        self.dir.join("kernel")
    }
    fn fio_binary(&self) -> PathBuf {
        self.dir.join("bin/fio")
    }
    fn busybox(&self) -> PathBuf {
        self.dir.join("bin/busybox")
    }
    fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.cpio.gz")
    }
    fn initrd_key(&self) -> PathBuf {
        self.dir.join("initrd.key")
    }
    /// The version of the unpacked kernel whose modules depmod indexed.
    fn kernel_version(&self) -> Option<String> {
        let modules = self.kernel().join("lib/modules");
        let version = fs::read_dir(&modules)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .next()?;
        modules.join(&version).join("modules.dep").is_file().then_some(version)
    }
}

/// Builds what is missing and returns the paths; prints one line when nothing was missing.
pub fn ensure_built(dir: &Path) -> Result<Built, String> {
    let layout = Layout { dir: dir.to_path_buf() };
    let mut pending = pending_steps(&layout);
    if pending.is_empty() {
        let built = built(&layout)?;
        println!(
            "xtask: peer: up to date in {} (kernel {}, {FIO_VERSION}, {})",
            dir.display(),
            built.kernel_version,
            built.initrd.display()
        );
        return Ok(built);
    }
    fs::create_dir_all(dir).map_err(|e| format!("peer: creating {}: {e}", dir.display()))?;
    // One build per directory at a time (e.g. `ipio --linux` beside `fio-compare`); the kernel
    // drops the lock if the builder dies.
    let lock_path = dir.join("build.lock");
    let lock = fs::File::create(&lock_path).map_err(|e| format!("peer: {}: {e}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        println!(
            "xtask: peer: another process is building in {}; waiting for it",
            dir.display()
        );
        lock.lock()
            .map_err(|e| format!("peer: locking {}: {e}", lock_path.display()))?;
        pending = pending_steps(&layout);
    }
    ensure_packages(&pending)?;
    let start = std::time::Instant::now();
    for step in pending {
        match step {
            Step::Kernel => build_kernel(&layout)?,
            Step::Busybox => build_busybox(&layout)?,
            Step::Fio => build_fio(&layout)?,
            Step::Initramfs => build_initramfs(&layout)?,
        }
    }
    let built = built(&layout)?;
    println!(
        "xtask: peer: built in {:.0} s: kernel {}, {FIO_VERSION}, {}",
        start.elapsed().as_secs_f64(),
        built.kernel_version,
        built.initrd.display()
    );
    Ok(built)
}

fn built(layout: &Layout) -> Result<Built, String> {
    let kernel_version = layout
        .kernel_version()
        .ok_or_else(|| format!("peer: no unpacked kernel in {}", layout.kernel().display()))?;
    let kernel_image = layout.kernel().join(format!("boot/vmlinuz-{kernel_version}"));
    if !kernel_image.is_file() {
        return Err(format!("peer: the kernel package has no {}", kernel_image.display()));
    }
    Ok(Built {
        dir: layout.dir.clone(),
        kernel_version,
        kernel_image,
        initrd: layout.initrd(),
    })
}

/// The steps whose result is missing or out of date, in order.
fn pending_steps(layout: &Layout) -> Vec<Step> {
    let mut steps = Vec::new();
    if layout.kernel_version().is_none() {
        steps.push(Step::Kernel);
    }
    if !layout.busybox().is_file() {
        steps.push(Step::Busybox);
    }
    if !layout.fio_binary().is_file() {
        steps.push(Step::Fio);
    }
    let key = fs::read_to_string(layout.initrd_key()).ok();
    if !steps.is_empty() || !layout.initrd().is_file() || key != Some(initramfs_key(layout)) {
        steps.push(Step::Initramfs);
    }
    steps
}

/// What the initramfs is made of: a change to the init script, the kernel, either program or
/// the layout rebuilds it.
fn initramfs_key(layout: &Layout) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    h = fnv1a(LAYOUT_VERSION.as_bytes(), h);
    h = fnv1a(GUEST_INIT.as_bytes(), h);
    h = fnv1a(layout.kernel_version().unwrap_or_default().as_bytes(), h);
    for m in MODULES {
        h = fnv1a(m.as_bytes(), h);
    }
    for file in [layout.fio_binary(), layout.busybox()] {
        let stamp = fs::metadata(&file)
            .map(|m| format!("{} {:?}", m.len(), m.modified().ok()))
            .unwrap_or_default();
        h = fnv1a(stamp.as_bytes(), h);
    }
    format!("{h:016x}\n")
}

/// FNV-1a, 64 bits: a hash that does not change between Rust releases.
fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The packages `steps` need that are not installed, each once, in order.
fn missing_packages(steps: &[Step], installed: impl Fn(&str) -> bool) -> Vec<&'static str> {
    let mut missing = Vec::new();
    for p in steps.iter().flat_map(|s| s.packages()) {
        if !missing.contains(p) && !installed(p) {
            missing.push(*p);
        }
    }
    missing
}

/// The command that installs `missing` (with an update first when apt has no package lists).
fn install_command(missing: &[&str], have_lists: bool) -> String {
    let install = format!("apt-get install -y --no-install-recommends {}", missing.join(" "));
    if have_lists {
        install
    } else {
        format!("apt-get update && {install}")
    }
}

/// Whether the machine's apt has package lists (a fresh container often has none).
fn have_apt_lists() -> bool {
    fs::read_dir("/var/lib/apt/lists").is_ok_and(|d| {
        d.filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().contains("_Packages"))
    })
}

fn ensure_apt() -> Result<(), String> {
    for program in ["apt-get", "apt-cache", "dpkg-deb", "dpkg-query"] {
        if !crate::setup::have_program(program) {
            return Err(format!(
                "peer build: {program} not found: the peer is built from Debian packages and needs a Debian \
                 (or Debian-based) machine with apt and dpkg"
            ));
        }
    }
    Ok(())
}

/// Installs the packages the pending steps need when running as root; otherwise fails with
/// the command to run.
fn ensure_packages(steps: &[Step]) -> Result<(), String> {
    ensure_apt()?;
    let missing = missing_packages(steps, crate::setup::package_installed);
    if missing.is_empty() {
        return Ok(());
    }
    let have_lists = have_apt_lists();
    let command = install_command(&missing, have_lists);
    if !crate::setup::is_root() {
        return Err(format!(
            "peer build needs the Debian packages {}; run as root: {command}",
            missing.join(", ")
        ));
    }
    println!("xtask: peer: installing what the build needs: {command}");
    if !have_lists {
        apt_lists_update()?;
    }
    crate::setup::apt_get_install(&missing, crate::setup::Recommends::Skip)
        .map_err(|e| format!("peer build: installing {}: {e}", missing.join(" ")))
}

fn apt_lists_update() -> Result<(), String> {
    crate::sh(Command::new("apt-get").args(["-o", "DPkg::Lock::Timeout=600", "update"]))
        .map_err(|e| format!("peer build: apt-get update: {e}"))
}

/// Runs `cmd` in `dir`, echoing it; its output goes to the terminal.
fn run_in(cmd: &mut Command, dir: &Path) -> Result<(), String> {
    cmd.current_dir(dir);
    let shown = format!("{cmd:?}").replace('"', "");
    println!("xtask: peer: $ (cd {}) {shown}", dir.display());
    let status = cmd
        .status()
        .map_err(|e| format!("peer build: cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("peer build: command failed ({status}): {shown}"))
    }
}

/// Runs `cmd` in `dir` with its output appended to `log`; on failure the error carries the
/// log's last lines.
fn run_logged(cmd: &mut Command, dir: &Path, log: &Path) -> Result<(), String> {
    cmd.current_dir(dir);
    let shown = format!("{cmd:?}").replace('"', "");
    println!("xtask: peer: $ (cd {}) {shown}  >> {}", dir.display(), log.display());
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("peer build: {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("peer build: {}: {e}", log.display()))?;
    let status = cmd
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .status()
        .map_err(|e| format!("peer build: cannot run {shown}: {e}"))?;
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(15).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(format!(
        "peer build: command failed ({status}): {shown}\n  last lines of {}:\n    {}",
        log.display(),
        tail.join("\n    ")
    ))
}

/// A program that lives in /usr/sbin or /sbin (not on a user's PATH everywhere).
fn sbin(program: &str) -> PathBuf {
    if crate::setup::have_program(program) {
        return PathBuf::from(program);
    }
    ["/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(program))
}

fn remove_dir(path: &Path) -> Result<(), String> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("peer build: removing {}: {e}", path.display())),
    }
}

fn create_dir(path: &Path) -> Result<(), String> {
    fs::create_dir_all(path).map_err(|e| format!("peer build: creating {}: {e}", path.display()))
}

/// The first `.deb` of `package` in `debs`, downloaded with `apt-get download` when absent.
fn deb_of(package: &str, debs: &Path) -> Result<PathBuf, String> {
    create_dir(debs)?;
    let find = || {
        fs::read_dir(debs).ok().and_then(|d| {
            d.filter_map(Result::ok).map(|e| e.path()).find(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with(&format!("{package}_")) && n.ends_with(".deb")
                })
            })
        })
    };
    if let Some(deb) = find() {
        return Ok(deb);
    }
    println!("xtask: peer: downloading {package} from the machine's Debian mirror");
    let mut download = Command::new("apt-get");
    if crate::setup::is_root() {
        // The cache is root's: apt's download sandbox user could not write into it.
        download.args(["-o", "APT::Sandbox::User=root"]);
    }
    run_in(download.args(["download", package]), debs)
        .map_err(|e| format!("{e}\n  (is the package list current? as root: apt-get update)"))?;
    find().ok_or_else(|| {
        format!(
            "peer build: apt-get download {package} left no {package}_*.deb in {}",
            debs.display()
        )
    })
}

/// The versioned kernel package `linux-image-amd64` depends on, from `apt-cache depends`.
fn kernel_package_of(depends: &str) -> Option<String> {
    depends.lines().find_map(|l| {
        let name = l.trim().strip_prefix("Depends:")?.trim();
        let versioned = name
            .strip_prefix("linux-image-")
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
        versioned.then(|| name.to_string())
    })
}

fn build_kernel(layout: &Layout) -> Result<(), String> {
    if !have_apt_lists() {
        if !crate::setup::is_root() {
            return Err("peer build: apt has no package lists; run as root: apt-get update".into());
        }
        apt_lists_update()?;
    }
    let out = Command::new("apt-cache")
        .args(["depends", "linux-image-amd64"])
        .output()
        .map_err(|e| format!("peer build: cannot run apt-cache: {e}"))?;
    let package = kernel_package_of(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
        format!(
            "peer build: `apt-cache depends linux-image-amd64` names no linux-image-N package (is this an amd64 \
             Debian with package lists?): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let deb = deb_of(&package, &layout.debs())?;
    let staging = layout.dir.join("kernel.partial");
    remove_dir(&staging)?;
    run_in(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&staging), &layout.dir)?;
    let modules = staging.join("lib/modules");
    let version = fs::read_dir(&modules)
        .map_err(|e| format!("peer build: {} has no lib/modules ({e})", deb.display()))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .ok_or_else(|| format!("peer build: {} has no kernel modules", deb.display()))?;
    run_in(
        Command::new(sbin("depmod")).arg("-b").arg(&staging).arg(&version),
        &layout.dir,
    )?;
    remove_dir(&layout.kernel())?;
    fs::rename(&staging, layout.kernel()).map_err(|e| format!("peer build: moving the kernel into place: {e}"))?;
    println!("xtask: peer: kernel {version} from {package}");
    Ok(())
}

fn build_busybox(layout: &Layout) -> Result<(), String> {
    let deb = deb_of("busybox-static", &layout.debs())?;
    let staging = layout.dir.join("busybox.partial");
    remove_dir(&staging)?;
    run_in(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&staging), &layout.dir)?;
    create_dir(&layout.dir.join("bin"))?;
    fs::copy(staging.join("bin/busybox"), layout.busybox())
        .map_err(|e| format!("peer build: {} has no bin/busybox: {e}", deb.display()))?;
    remove_dir(&staging)
}

/// The machine's Debian mirror: the first `URIs:` of a deb822 source (or `deb` line of a
/// one-line list) that serves `codename` itself (not its `-security` suite).
fn mirror_of(sources: &[String], codename: &str) -> Option<String> {
    for text in sources {
        // deb822: paragraphs of `Key: value` lines.
        for paragraph in text.split("\n\n") {
            let field = |key: &str| {
                paragraph
                    .lines()
                    .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            };
            if let (Some(uris), Some(suites)) = (field("URIs:"), field("Suites:"))
                && suites.split_whitespace().any(|s| s == codename)
                && field("Types:").is_none_or(|t| t.split_whitespace().any(|t| t == "deb"))
                && let Some(uri) = uris.split_whitespace().next()
            {
                return Some(uri.to_string());
            }
        }
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("deb") {
                continue;
            }
            let mut rest = words.skip_while(|w| w.starts_with('['));
            if let (Some(uri), Some(suite)) = (rest.next(), rest.next())
                && suite == codename
            {
                return Some(uri.to_string());
            }
        }
    }
    None
}

/// The machine's apt source files: `sources.list.d/*.sources` and `*.list`, then `sources.list`.
fn apt_sources() -> Vec<String> {
    let mut files: Vec<PathBuf> = fs::read_dir("/etc/apt/sources.list.d")
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files.push(PathBuf::from("/etc/apt/sources.list"));
    files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "sources" || e == "list"))
        .filter_map(|p| fs::read_to_string(p).ok())
        .collect()
}

/// fio 3.33 from Debian's source package with Debian's patches, configured static.
fn build_fio(layout: &Layout) -> Result<(), String> {
    let base = layout.dir.join("fio");
    let apt = base.join("apt");
    let src = base.join("src");
    for d in [
        apt.join("lists/partial"),
        apt.join("parts"),
        apt.join("cache/archives/partial"),
        src.clone(),
    ] {
        create_dir(&d)?;
    }
    let tarball = |infix: &str| {
        fs::read_dir(&src).ok().and_then(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains(infix)))
        })
    };
    if tarball(".orig.tar.").is_none() || tarball(".debian.tar.").is_none() {
        let codename = crate::setup::debian_codename();
        let mirror = mirror_of(&apt_sources(), &codename).ok_or_else(|| {
            format!(
                "peer build: no Debian mirror for {codename} in /etc/apt/sources.list(.d): fio's source package is \
                 fetched from the machine's own mirror"
            )
        })?;
        let list = apt.join("sources.list");
        fs::write(&list, format!("deb-src {mirror} {codename} main\n"))
            .map_err(|e| format!("peer build: {}: {e}", list.display()))?;
        let apt_get = || {
            let mut c = Command::new("apt-get");
            for o in [
                format!("Dir::Etc::SourceList={}", list.display()),
                format!("Dir::Etc::SourceParts={}", apt.join("parts").display()),
                format!("Dir::State::Lists={}", apt.join("lists").display()),
                format!("Dir::Cache={}", apt.join("cache").display()),
            ] {
                c.args(["-o", &o]);
            }
            if crate::setup::is_root() {
                // The private directories are root's: apt's download sandbox user could not write them.
                c.args(["-o", "APT::Sandbox::User=root"]);
            }
            c
        };
        println!("xtask: peer: downloading fio's source package ({FIO_SOURCE}) from {mirror}");
        run_in(apt_get().arg("update"), &src)?;
        run_in(apt_get().args(["source", "--download-only", FIO_SOURCE]), &src)?;
    }
    let orig = tarball(".orig.tar.").ok_or("peer build: apt-get source left no fio .orig tarball")?;
    let debian = tarball(".debian.tar.").ok_or("peer build: apt-get source left no fio .debian tarball")?;
    let build = base.join("build");
    remove_dir(&build)?;
    create_dir(&build)?;
    run_in(Command::new("tar").arg("xf").arg(&orig), &build)?;
    let tree = fs::read_dir(&build)
        .map_err(|e| format!("peer build: {}: {e}", build.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .ok_or("peer build: fio's tarball holds no directory")?;
    run_in(Command::new("tar").arg("xf").arg(&debian), &tree)?;
    let series = fs::read_to_string(tree.join("debian/patches/series")).unwrap_or_default();
    for patch in series
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let file = tree.join("debian/patches").join(patch);
        let f = fs::File::open(&file).map_err(|e| format!("peer build: {}: {e}", file.display()))?;
        run_in(Command::new("patch").args(["-p1", "-s"]).stdin(f), &tree)?;
    }
    let log = base.join("build.log");
    let _ = fs::remove_file(&log);
    run_logged(Command::new("./configure").args(FIO_CONFIGURE), &tree, &log)?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    run_logged(Command::new("make").arg(format!("-j{jobs}")).arg("fio"), &tree, &log)?;
    create_dir(&layout.dir.join("bin"))?;
    let staged = layout.dir.join("bin/fio.partial");
    run_in(
        Command::new("strip").arg("-o").arg(&staged).arg(tree.join("fio")),
        &layout.dir,
    )?;
    let version = Command::new(&staged)
        .arg("--version")
        .output()
        .map_err(|e| format!("peer build: running the new fio: {e}"))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if version != FIO_VERSION {
        return Err(format!("peer build: the new fio says '{version}', not {FIO_VERSION}"));
    }
    fs::rename(&staged, layout.fio_binary()).map_err(|e| format!("peer build: moving fio into place: {e}"))?;
    // The tree is large and rebuilt from the tarballs when needed.
    remove_dir(&build)
}

/// The module files of `modprobe --show-depends` (`insmod PATH [OPTIONS]` lines, built-ins
/// skipped), relative to the kernel's module directory `moddir`.
fn insmod_paths(show_depends: &str, moddir: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for line in show_depends.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("insmod") => {
                let path = words
                    .next()
                    .ok_or_else(|| format!("modprobe: '{line}' names no file"))?;
                let rel = path
                    .strip_prefix(moddir)
                    .map(|r| r.trim_start_matches('/'))
                    .ok_or_else(|| format!("modprobe: {path} is outside {moddir}"))?;
                out.push(rel.to_string());
            }
            Some("builtin") | None => {}
            Some(_) => return Err(format!("modprobe: unexpected line '{line}'")),
        }
    }
    Ok(out)
}

/// A module's name in the initramfs: compressed modules are stored decompressed (busybox's
/// insmod takes plain `.ko` files). Returns the name and the decompressor, if any.
fn stored_module(rel: &str) -> Result<(String, Option<&'static str>), String> {
    for (suffix, tool) in [(".ko.xz", "xz"), (".ko.zst", "zstd"), (".ko.gz", "gzip")] {
        if let Some(stem) = rel.strip_suffix(suffix) {
            return Ok((format!("{stem}.ko"), Some(tool)));
        }
    }
    if rel.ends_with(".ko") {
        Ok((rel.to_string(), None))
    } else {
        Err(format!("modprobe named {rel}, not a .ko file"))
    }
}

/// Each module's load chain (`target path` lines, as the guest's `load` reads them) and the
/// union of the chains in load order (`order.list`, one path a line).
fn module_lists(chains: &[(&str, Vec<String>)]) -> (String, String) {
    let mut deps = String::new();
    let mut order: Vec<&str> = Vec::new();
    for (target, paths) in chains {
        for p in paths {
            deps.push_str(&format!("{target} {p}\n"));
            if !order.contains(&p.as_str()) {
                order.push(p);
            }
        }
    }
    let order = order.iter().map(|p| format!("{p}\n")).collect();
    (deps, order)
}

/// Every directory above each of `files` (`a/b/c` gives `a` and `a/b`), parents first.
fn parent_dirs<'a>(files: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for f in files {
        let mut at = 0;
        while let Some(i) = f[at..].find('/') {
            dirs.insert(f[..at + i].to_string());
            at += i + 1;
        }
    }
    dirs
}

/// The initramfs: busybox and its applets, fio, the modules the guest loads with their lists,
/// the init script and the two device nodes the console needs before devtmpfs is mounted.
fn build_initramfs(layout: &Layout) -> Result<(), String> {
    let version = layout
        .kernel_version()
        .ok_or("peer build: no kernel to pack modules of")?;
    let kernel = layout.kernel();
    let moddir = kernel.join("lib/modules").join(&version);
    let moddir_text = moddir.display().to_string();
    let mut chains = Vec::new();
    for target in MODULES {
        let out = Command::new(sbin("modprobe"))
            .arg("-d")
            .arg(&kernel)
            .args(["-S", &version, "--show-depends", target])
            .output()
            .map_err(|e| format!("peer build: cannot run modprobe: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "peer build: modprobe --show-depends {target} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let paths = insmod_paths(&String::from_utf8_lossy(&out.stdout), &moddir_text)?;
        let mut stored = Vec::new();
        for p in paths {
            stored.push((stored_module(&p)?.0, p));
        }
        chains.push((*target, stored));
    }
    let names: Vec<(&str, Vec<String>)> = chains
        .iter()
        .map(|(t, v)| (*t, v.iter().map(|(s, _)| s.clone()).collect()))
        .collect();
    let (deps_list, order_list) = module_lists(&names);

    let applets = Command::new(layout.busybox())
        .arg("--list")
        .output()
        .map_err(|e| format!("peer build: running busybox --list: {e}"))?;
    let applets = String::from_utf8_lossy(&applets.stdout).into_owned();
    let read = |p: &Path| fs::read(p).map_err(|e| format!("peer build: reading {}: {e}", p.display()));

    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut seen = BTreeSet::new();
    for (stored, original) in chains.iter().flat_map(|(_, v)| v) {
        if !seen.insert(stored.clone()) {
            continue;
        }
        let source = moddir.join(original);
        let bytes = match stored_module(original)?.1 {
            None => read(&source)?,
            Some(tool) => {
                let out = Command::new(tool)
                    .arg("-dc")
                    .arg(&source)
                    .output()
                    .map_err(|e| format!("peer build: cannot run {tool}: {e}"))?;
                if !out.status.success() {
                    return Err(format!("peer build: {tool} -dc {} failed", source.display()));
                }
                out.stdout
            }
        };
        files.push((format!("lib/modules/{version}/{stored}"), bytes));
    }

    let mut archive = Archive::new();
    let module_dirs = parent_dirs(files.iter().map(|(n, _)| n.as_str()));
    for d in ["bin", "dev", "etc", "proc", "sys", "tmp"] {
        archive.dir(d, 0o755);
    }
    for d in &module_dirs {
        archive.dir(d, 0o755);
    }
    archive.char_dev("dev/console", 0o600, 5, 1);
    archive.char_dev("dev/null", 0o666, 1, 3);
    archive.file("init", 0o755, GUEST_INIT.as_bytes());
    archive.file("bin/busybox", 0o755, &read(&layout.busybox())?);
    for applet in applets
        .split_whitespace()
        .filter(|a| *a != "busybox" && !a.contains('/'))
    {
        archive.symlink(&format!("bin/{applet}"), "busybox");
    }
    archive.file("bin/fio", 0o755, &read(&layout.fio_binary())?);
    for (name, bytes) in &files {
        archive.file(name, 0o644, bytes);
    }
    archive.file(&format!("lib/modules/{version}/deps.list"), 0o644, deps_list.as_bytes());
    archive.file(
        &format!("lib/modules/{version}/order.list"),
        0o644,
        order_list.as_bytes(),
    );
    let bytes = archive.finish();

    let staged = layout.dir.join("initrd.cpio.gz.partial");
    gzip_to(&bytes, &staged)?;
    fs::rename(&staged, layout.initrd()).map_err(|e| format!("peer build: moving the initramfs into place: {e}"))?;
    fs::write(layout.initrd_key(), initramfs_key(layout))
        .map_err(|e| format!("peer build: writing initrd.key: {e}"))?;
    let size = fs::metadata(layout.initrd()).map(|m| m.len()).unwrap_or(0);
    println!(
        "xtask: peer: initramfs {} ({:.1} MiB; modules: {})",
        layout.initrd().display(),
        size as f64 / f64::from(1u32 << 20),
        order_list
            .lines()
            .map(|l| l.rsplit('/').next().unwrap_or(l))
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}

/// `gzip -6 -n` of `bytes` into `out`.
fn gzip_to(bytes: &[u8], out: &Path) -> Result<(), String> {
    let file = fs::File::create(out).map_err(|e| format!("peer build: {}: {e}", out.display()))?;
    let mut child = Command::new("gzip")
        .args(["-6", "-n", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::from(file))
        .spawn()
        .map_err(|e| format!("peer build: cannot run gzip: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(bytes)
        .map_err(|e| format!("peer build: writing to gzip: {e}"))?;
    let status = child.wait().map_err(|e| format!("peer build: gzip: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("peer build: gzip failed ({status})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_package_is_the_versioned_dependency() {
        let out = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(kernel_package_of(out).as_deref(), Some("linux-image-6.1.0-57-amd64"));
        let other = "linux-image-amd64\n  Depends: linux-base\n  Depends: linux-image-6.1.0-9-amd64\n";
        assert_eq!(kernel_package_of(other).as_deref(), Some("linux-image-6.1.0-9-amd64"));
        assert_eq!(
            kernel_package_of("linux-image-amd64\n  Depends: linux-image-amd64-signed\n"),
            None
        );
        assert_eq!(kernel_package_of(""), None);
    }

    #[test]
    fn the_mirror_is_the_one_serving_the_release() {
        let deb822 = "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n\
                      Components: main\n\nTypes: deb\n# a comment\nURIs: http://mirror.example/debian\n\
                      Suites: bookworm bookworm-updates\nComponents: main\n"
            .to_string();
        assert_eq!(
            mirror_of(&[deb822], "bookworm").as_deref(),
            Some("http://mirror.example/debian")
        );
        let one_line = "# old style\ndeb [arch=amd64] http://ftp.example/debian bookworm main\n".to_string();
        assert_eq!(
            mirror_of(&["".into(), one_line.clone()], "bookworm").as_deref(),
            Some("http://ftp.example/debian")
        );
        assert_eq!(mirror_of(&[one_line], "trixie"), None);
    }

    #[test]
    fn modprobe_chains_become_relative_paths_and_lists() {
        let moddir = "/c/kernel/lib/modules/6.1.0-57-amd64";
        let show = "builtin configfs\ninsmod /c/kernel/lib/modules/6.1.0-57-amd64/kernel/drivers/scsi/scsi_common.ko \n\
                    insmod /c/kernel/lib/modules/6.1.0-57-amd64/kernel/drivers/scsi/sd_mod.ko opt=1\n";
        let paths = insmod_paths(show, moddir).unwrap();
        assert_eq!(
            paths,
            ["kernel/drivers/scsi/scsi_common.ko", "kernel/drivers/scsi/sd_mod.ko"]
        );
        assert!(
            insmod_paths("insmod /elsewhere/x.ko\n", moddir)
                .unwrap_err()
                .contains("outside")
        );
        assert!(insmod_paths("rmmod x\n", moddir).unwrap_err().contains("unexpected"));

        let chains = vec![
            ("sd_mod", vec!["a/common.ko".to_string(), "a/sd_mod.ko".to_string()]),
            ("nvme", vec!["a/common.ko".to_string(), "b/nvme.ko".to_string()]),
        ];
        let (deps, order) = module_lists(&chains);
        assert_eq!(
            deps,
            "sd_mod a/common.ko\nsd_mod a/sd_mod.ko\nnvme a/common.ko\nnvme b/nvme.ko\n"
        );
        assert_eq!(
            order, "a/common.ko\na/sd_mod.ko\nb/nvme.ko\n",
            "each module once, in load order"
        );
    }

    #[test]
    fn compressed_modules_are_stored_plain() {
        assert_eq!(stored_module("k/x.ko").unwrap(), ("k/x.ko".into(), None));
        assert_eq!(stored_module("k/x.ko.xz").unwrap(), ("k/x.ko".into(), Some("xz")));
        assert_eq!(stored_module("k/x.ko.zst").unwrap(), ("k/x.ko".into(), Some("zstd")));
        assert!(stored_module("k/x.o").is_err());
    }

    #[test]
    fn parents_come_before_their_children() {
        let dirs: Vec<String> = parent_dirs(["lib/modules/v/kernel/a.ko", "lib/modules/v/x.list"])
            .into_iter()
            .collect();
        assert_eq!(dirs, ["lib", "lib/modules", "lib/modules/v", "lib/modules/v/kernel"]);
    }

    #[test]
    fn missing_packages_are_named_once_with_the_command_to_install_them() {
        let steps = [Step::Kernel, Step::Fio, Step::Initramfs];
        let missing = missing_packages(&steps, |p| p == "gcc" || p == "gzip");
        assert_eq!(
            missing,
            [
                "kmod",
                "make",
                "patch",
                "xz-utils",
                "binutils",
                "libaio-dev",
                "zlib1g-dev"
            ]
        );
        assert!(missing_packages(&[Step::Busybox], |_| false).is_empty());
        assert_eq!(
            install_command(&["kmod", "make"], true),
            "apt-get install -y --no-install-recommends kmod make"
        );
        assert_eq!(
            install_command(&["kmod"], false),
            "apt-get update && apt-get install -y --no-install-recommends kmod"
        );
    }

    #[test]
    fn a_built_cache_has_nothing_pending_until_an_input_changes() {
        let dir = std::env::temp_dir().join(format!("baremq-peer-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let layout = Layout { dir: dir.clone() };
        assert_eq!(
            pending_steps(&layout),
            [Step::Kernel, Step::Busybox, Step::Fio, Step::Initramfs]
        );
        let modules = dir.join("kernel/lib/modules/6.1.0-57-amd64");
        fs::create_dir_all(&modules).unwrap();
        fs::write(modules.join("modules.dep"), "").unwrap();
        fs::create_dir_all(dir.join("bin")).unwrap();
        fs::write(layout.busybox(), "bb").unwrap();
        fs::write(layout.fio_binary(), "fio").unwrap();
        assert_eq!(pending_steps(&layout), [Step::Initramfs]);
        fs::write(layout.initrd(), "gz").unwrap();
        fs::write(layout.initrd_key(), initramfs_key(&layout)).unwrap();
        assert!(pending_steps(&layout).is_empty());
        assert_eq!(layout.kernel_version().as_deref(), Some("6.1.0-57-amd64"));
        // A new fio (another size) repacks the initramfs, nothing else.
        fs::write(layout.fio_binary(), "fio-new").unwrap();
        assert_eq!(pending_steps(&layout), [Step::Initramfs]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
