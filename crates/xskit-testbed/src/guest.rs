//! A Linux guest on the testbed, under QEMU (TCG), for what this host's kernel lacks — the
//! bonding driver, virtio_net (whose transmit path builds skbs from UMEM pages), a NIC other
//! than veth, AF_XDP zero-copy. Two kernels ([`GuestKernel`]): Debian 12's 6.12, the bonding
//! reference, and the newest Linux 7.x of Debian's trixie-backports suite, whose virtio NICs do
//! AF_XDP zero-copy as a real NIC's driver does: they filter unicast by destination MAC and
//! bind XSK pools through the DMA API (`iommu_platform=on`).
//!
//! The guest boots a busybox initramfs that loads a few modules, mounts the host's root
//! read-only over 9p and chroots into it, so it runs the host's own binaries (`xskit`, `ip`,
//! `ethtool`, `ping`); there is no disk image. Its NICs are virtio-net devices on TAP devices
//! in a namespace of the guest's own, so the guest reaches only that namespace. A script runs
//! per boot: [`Guest::run`] boots, runs it, and powers off (about 5 s under TCG); its output and
//! exit status come back through a second, writable 9p share.
//!
//! Dropping a [`Guest`] removes its namespace (and TAP devices) and its job directory; a
//! running guest is killed when its [`RunningGuest`] is dropped, on SIGINT/SIGTERM, and at its
//! timeout in any case (QEMU runs under `timeout`, so not even a SIGKILLed test leaves one
//! behind for long).
//!
//! What it needs: `qemu-system-x86`, `busybox-static`, `cpio`, and the kernels that
//! `scripts/guest-testbed.sh` (run by `scripts/setup.sh test`) fetches into
//! [`GuestKernel::dir`] (`vmlinuz` and `modules/`), with QEMU 10 from backports in
//! [`qemu_dir`] where the system's is older.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{add_netns, ip, mac_string, veth, Host, Netns, NsGuard, LIVE, NEXT, NS_PREFIX};

/// Where `scripts/guest-testbed.sh` puts Debian's 6.12 kernel: `$XSKIT_GUEST_DIR`, or
/// `/var/cache/xskit/guest` ([`GuestKernel::Reference`]'s directory).
pub fn kernel_dir() -> PathBuf {
    GuestKernel::Reference.dir()
}

/// The kernel a guest boots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GuestKernel {
    /// Debian 12's 6.12: the bonding driver the bond tests compare with. Its virtio_net has
    /// no AF_XDP zero-copy.
    #[default]
    Reference,
    /// The newest Linux 7.x of Debian's trixie-backports suite, its NICs set up for AF_XDP
    /// zero-copy (`iommu_platform=on`, `disable-legacy=on`: virtio_net binds an XSK pool only
    /// through the DMA API).
    ZeroCopy,
}

impl GuestKernel {
    /// What this kernel's command line needs.
    ///
    /// The zero-copy kernel boots without address-space randomisation. Its virtio_net (a
    /// module) sends every AF_XDP frame behind one virtio-net header, a static variable of the
    /// module that it maps for DMA, and the DMA address it gets is not where that variable is:
    /// `__pa()` of a module address is its offset from the kernel's mapping plus the kernel's
    /// physical base, so the device reads the header from another page. With randomisation
    /// that page lands inside the guest's memory in some boots, and once anything is written
    /// there QEMU hands the TAP device a header it refuses (`writev` gets EINVAL) and every
    /// frame the guest transmits from a socket is lost, in a boot that gets there. Without
    /// randomisation the address is fixed, just above the first GiB of guest-physical space
    /// (`0x40000000` plus the module's offset), where a 1 GiB guest has no memory and QEMU
    /// reads zeros: a valid, empty header.
    /// `guest_zc.rs` checks this address on every run.
    pub fn kernel_args(self) -> &'static str {
        match self {
            GuestKernel::Reference => "",
            GuestKernel::ZeroCopy => "nokaslr",
        }
    }

    /// Where `scripts/guest-testbed.sh` puts this kernel: `$XSKIT_GUEST_DIR` (default
    /// `/var/cache/xskit/guest`) for the reference, `$XSKIT_GUEST_ZC_DIR` (default
    /// `/var/cache/xskit/guest-zc`) for the zero-copy one.
    pub fn dir(self) -> PathBuf {
        let (var, default) = match self {
            GuestKernel::Reference => ("XSKIT_GUEST_DIR", "/var/cache/xskit/guest"),
            GuestKernel::ZeroCopy => ("XSKIT_GUEST_ZC_DIR", "/var/cache/xskit/guest-zc"),
        };
        std::env::var_os(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(default))
    }

    /// The kernel's release, as `scripts/guest-testbed.sh` recorded it.
    pub fn release(self) -> io::Result<String> {
        Ok(std::fs::read_to_string(self.dir().join("release"))?
            .trim()
            .to_string())
    }

    fn describe(self) -> &'static str {
        match self {
            GuestKernel::Reference => "Debian 12's 6.12 kernel",
            GuestKernel::ZeroCopy => "Linux 7.x from Debian's trixie-backports",
        }
    }
}

const BUSYBOX: &str = "/bin/busybox";
const QEMU: &str = "qemu-system-x86_64";

/// Where `scripts/guest-testbed.sh` unpacks QEMU from the release's backports suite when the
/// system's is older than 10: `$XSKIT_GUEST_QEMU_DIR`, or `/var/cache/xskit/qemu`. Debian 12's
/// QEMU 7.2 completes some of a zero-copy guest's transmits without writing them to the TAP
/// device, at random, for the rest of a boot.
pub fn qemu_dir() -> PathBuf {
    std::env::var_os("XSKIT_GUEST_QEMU_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/xskit/qemu"))
}

/// The QEMU a guest runs and the arguments it needs first: the unpacked one in [`qemu_dir`]
/// with its data, its SeaBIOS and the system's iPXE option ROMs; otherwise the system's.
fn qemu() -> (PathBuf, Vec<String>) {
    let dir = qemu_dir();
    let unpacked = dir.join("usr/bin").join(QEMU);
    if !unpacked.is_file() {
        return (PathBuf::from(QEMU), Vec::new());
    }
    let data = ["usr/share/qemu", "usr/share/seabios"].map(|d| dir.join(d));
    let dirs = data.iter().map(|d| d.display().to_string());
    let dirs = dirs.chain(["/usr/lib/ipxe/qemu".to_string()]);
    (unpacked, dirs.flat_map(|d| ["-L".to_string(), d]).collect())
}
/// The guest's address block towards the namespace: 203.0.113.0/24, the namespace .1.
const NS_ADDR: &str = "203.0.113.1/24";

/// How to build a guest: `GuestConfig::default()` and the setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuestConfig {
    /// virtio-net NICs, each on a TAP device in the guest's namespace (`eth0`, `eth1`, ... in
    /// the guest; [`Guest::taps`] on the host side).
    pub nics: u32,
    /// Queue pairs per NIC (virtio multiqueue above 1).
    pub queues: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// Memory, MiB.
    pub memory_mib: u32,
    /// How long a boot and its script may take before the guest is killed.
    pub timeout: Duration,
    /// Appended to the guest kernel's command line (for tests of the testbed itself).
    pub extra_kernel_args: &'static str,
    /// The kernel to boot.
    pub kernel: GuestKernel,
}

impl Default for GuestConfig {
    fn default() -> Self {
        GuestConfig {
            nics: 1,
            queues: 1,
            cpus: 2,
            memory_mib: 1024,
            timeout: Duration::from_secs(180),
            extra_kernel_args: "",
            kernel: GuestKernel::Reference,
        }
    }
}

xskit_os::config_setters!(GuestConfig {
    /// Sets the number of NICs.
    nics: u32,
    /// Sets the queue pairs per NIC.
    queues: u32,
    /// Sets the virtual CPUs.
    cpus: u32,
    /// Sets the memory, MiB.
    memory_mib: u32,
    /// Sets the timeout of a boot and its script.
    timeout: Duration,
    /// Sets what is appended to the guest kernel's command line.
    extra_kernel_args: &'static str,
    /// Sets the kernel to boot.
    kernel: GuestKernel,
});

impl GuestConfig {
    /// A guest for AF_XDP zero-copy: the 7.x kernel and `nics` NICs of 2 queue pairs on
    /// 2 CPUs. As many queue pairs as CPUs, not more: with spare queue pairs virtio_net gives
    /// XDP a transmit queue pair per CPU and then receives on those queues too, where AF_XDP
    /// sockets cannot transmit; with none spare, XDP_TX and XDP_REDIRECT share the queues
    /// (under a lock, which the kernel logs) and every receive queue is one a socket can serve.
    pub fn zero_copy(nics: u32) -> GuestConfig {
        GuestConfig::default()
            .kernel(GuestKernel::ZeroCopy)
            .nics(nics)
            .queues(2)
            .cpus(2)
    }
}

/// A guest ready to boot: its namespace with TAP devices, its initramfs and job directory.
#[derive(Debug)]
pub struct Guest {
    ns: Netns,
    taps: Vec<String>,
    job: PathBuf,
    kernel: PathBuf,
    config: GuestConfig,
}

/// What one boot did.
#[derive(Clone, Debug)]
pub struct GuestRun {
    /// The script's exit status.
    pub status: i32,
    /// The script's stdout and stderr.
    pub output: String,
    /// The guest's serial console (kernel messages).
    pub console: String,
    /// From starting QEMU to its exit.
    pub elapsed: Duration,
}

impl GuestRun {
    /// The output, failing with the console and output when the script did not exit 0.
    pub fn ok(self) -> io::Result<String> {
        if self.status == 0 {
            return Ok(self.output);
        }
        Err(io::Error::other(format!(
            "the guest's script exited with {}:\n{}\n--- console ---\n{}",
            self.status,
            self.output,
            tail(&self.console, 40)
        )))
    }
}

/// The last lines of each `*.err` file a guest's commands wrote to the job `share`: what a
/// step that never finished was doing.
pub fn errors_written(share: &Path) -> String {
    let Ok(entries) = std::fs::read_dir(share) else {
        return String::new();
    };
    let mut files: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "err"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            format!("{}:\n{}\n", p.display(), tail(&text, 8))
        })
        .collect()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn missing(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "the guest testbed needs {what}: run scripts/setup.sh test (it installs \
             qemu-system-x86, busybox-static and cpio, and fetches the guest kernels into {} \
             and {}, and QEMU 10 into {} if the system's is older)",
            GuestKernel::Reference.dir().display(),
            GuestKernel::ZeroCopy.dir().display(),
            qemu_dir().display()
        ),
    )
}

/// Checks that everything a guest booting `kernel` needs is here, saying what is missing.
pub fn check_requirements(kernel: GuestKernel) -> io::Result<()> {
    let dir = kernel.dir();
    if !dir.join("vmlinuz").is_file() || !dir.join("modules/order").is_file() {
        return Err(missing(&format!(
            "{} in {}",
            kernel.describe(),
            dir.display()
        )));
    }
    if !Path::new(BUSYBOX).is_file() {
        return Err(missing("a static busybox at /bin/busybox"));
    }
    let qemu = qemu().0;
    for tool in [qemu.as_os_str(), "cpio".as_ref(), "timeout".as_ref()] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(missing(&tool.to_string_lossy()));
        }
    }
    Ok(())
}

/// The guest's /init: modules, the host's root over 9p, the job share, then the script in a
/// chroot, its status written back, and power off. Everything after the chroot runs the
/// host's binaries. The host's filesystem is read-only in the guest, /tmp included (it stays
/// visible: test binaries may live there); `$TMPDIR` (/run/tmp, a tmpfs) is for scratch. IPv6
/// is off, so the guest's own kernel sends nothing unasked on its NICs.
const INIT: &str = r#"#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sys /sys
$bb mount -t devtmpfs dev /dev
for m in $($bb cat /lib/modules/order); do
    args=
    [ "$m" = bonding.ko ] && args=max_bonds=0
    $bb insmod /lib/modules/$m $args || echo "xskit-guest: insmod $m failed"
done
$bb mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose host /host || echo "xskit-guest: no host root"
$bb mount -t tmpfs run /host/run
$bb mkdir -p /host/run/xskit-job
$bb mount -t 9p -o trans=virtio,version=9p2000.L job /host/run/xskit-job || echo "xskit-guest: no job share"
$bb mount -t proc proc /host/proc
$bb mount -t sysfs sys /host/sys
$bb mount -t devtmpfs dev /host/dev
$bb mkdir -p /host/run/tmp
$bb mount -t bpf bpf /host/sys/fs/bpf
$bb chroot /host /bin/sh -c 'cd /; PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; TMPDIR=/run/tmp; export PATH TMPDIR; ip link set lo up; for c in all default; do echo 1 > /proc/sys/net/ipv6/conf/$c/disable_ipv6; done; sh /run/xskit-job/run.sh > /run/xskit-job/output 2>&1; echo $? > /run/xskit-job/status'
$bb sync
$bb poweroff -f
"#;

impl Guest {
    /// Makes the guest's namespace with one TAP device per NIC (the first addressed
    /// 203.0.113.1/24, all up) and its initramfs. Boots nothing yet.
    pub fn new(config: &GuestConfig) -> io::Result<Guest> {
        if config.nics == 0 || config.nics > 8 || config.queues == 0 || config.queues > 8 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a guest takes 1 to 8 NICs of 1 to 8 queues",
            ));
        }
        check_requirements(config.kernel)?;
        crate::install_signal_cleanup();
        crate::sweep_stale();
        sweep_stale_jobs();
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let ns = Netns {
            name: format!("{NS_PREFIX}{pid}-{id}-g"),
        };
        LIVE.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(ns.name.clone());
        let job = std::env::temp_dir().join(format!("{JOB_PREFIX}{pid}-{id}"));
        // From here on, dropping the guest removes what was made.
        let guest = Guest {
            ns,
            taps: (0..config.nics).map(|i| format!("xgtap{i}")).collect(),
            job,
            kernel: config.kernel.dir(),
            config: *config,
        };
        ip(&["netns", "add", &guest.ns.name])?;
        // No router solicitation or DAD from the host's side mixes with a test's traffic.
        guest.ns.run(|| -> io::Result<()> {
            for scope in ["all", "default"] {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{scope}/disable_ipv6"), "1")?;
            }
            Ok(())
        })??;
        let name = guest.ns.name.clone();
        for tap in &guest.taps {
            let mut args = vec!["-n", &name, "tuntap", "add", "dev", tap, "mode", "tap"];
            if config.queues > 1 {
                args.push("multi_queue");
            }
            ip(&args)?;
            ip(&["-n", &name, "link", "set", tap, "up"])?;
        }
        ip(&["-n", &name, "addr", "add", NS_ADDR, "dev", &guest.taps[0]])?;
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        std::fs::create_dir_all(&guest.job)?;
        guest.build_initramfs()?;
        Ok(guest)
    }

    /// The namespace holding the TAP devices (the guest's only neighbour).
    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    /// The TAP devices, in the order of the guest's NICs.
    pub fn taps(&self) -> &[String] {
        &self.taps
    }

    /// The job share on the host's side, where the last boot's script wrote what it wrote to
    /// `/run/xskit-job` (kept until the next boot).
    pub fn share(&self) -> PathBuf {
        self.job.join("share")
    }

    /// The MAC address of the guest's NIC `i`.
    pub fn mac(i: u32) -> [u8; 6] {
        [0x02, 0x58, 0x47, 0x00, 0x00, i as u8]
    }

    fn build_initramfs(&self) -> io::Result<()> {
        let stage = self.job.join("initramfs");
        for dir in ["bin", "lib/modules", "proc", "sys", "dev", "host"] {
            std::fs::create_dir_all(stage.join(dir))?;
        }
        std::fs::copy(BUSYBOX, stage.join("bin/busybox"))?;
        let modules = self.kernel.join("modules");
        let order = std::fs::read_to_string(modules.join("order"))?;
        for module in order.split_whitespace() {
            std::fs::copy(modules.join(module), stage.join("lib/modules").join(module))?;
        }
        std::fs::write(stage.join("lib/modules/order"), &order)?;
        std::fs::write(stage.join("init"), INIT)?;
        std::fs::set_permissions(
            stage.join("init"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        let archive = std::fs::File::create(self.job.join("initramfs.cpio"))?;
        let mut find = Command::new("sh")
            .args(["-c", "find . | cpio -o -H newc --quiet"])
            .current_dir(&stage)
            .stdout(archive)
            .stderr(Stdio::piped())
            .spawn()?;
        let status = find.wait()?;
        if !status.success() {
            return Err(io::Error::other(
                "cpio could not pack the guest's initramfs",
            ));
        }
        Ok(())
    }

    fn qemu_args(&self) -> Vec<String> {
        let c = &self.config;
        let job = self.job.display();
        // One host thread runs the vCPUs in turn. With a thread each (MTTCG), QEMU 10.0
        // aborted a guest at random (`iotlb_to_section: Assertion section_index <
        // d->map.sections_nb failed`): a vCPU still held TLB entries of a memory map another
        // thread had replaced. In turn, a map change flushes every vCPU's TLB before any runs
        // again; the tests took as long either way here (guest.rs 63 s, guest_zc.rs 217 s).
        let mut args: Vec<String> = [
            "-accel",
            "tcg,thread=single",
            "-cpu",
            "max",
            "-display",
            "none",
            "-monitor",
            "none",
            "-qmp",
            &format!("unix:{job}/qmp.sock,server=on,wait=off"),
            "-no-reboot",
            "-nodefaults",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend([
            "-smp".into(),
            c.cpus.to_string(),
            "-m".into(),
            c.memory_mib.to_string(),
            "-serial".into(),
            format!("file:{job}/console"),
            "-kernel".into(),
            self.kernel.join("vmlinuz").display().to_string(),
            "-initrd".into(),
            format!("{job}/initramfs.cpio"),
            "-append".into(),
            format!(
                "console=ttyS0 panic=-1 quiet {} {}",
                c.kernel.kernel_args(),
                c.extra_kernel_args
            )
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
            "-virtfs".into(),
            "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap".into(),
            "-virtfs".into(),
            format!("local,path={job}/share,mount_tag=job,security_model=none"),
        ]);
        for (i, tap) in self.taps.iter().enumerate() {
            let mac = mac_string(&Guest::mac(i as u32));
            let (queues, mq) = if c.queues > 1 {
                (
                    format!(",queues={}", c.queues),
                    format!(",mq=on,vectors={}", 2 * c.queues + 2),
                )
            } else {
                (String::new(), String::new())
            };
            // Through the DMA API, as virtio_net needs for an XSK pool (zero-copy).
            let dma = match c.kernel {
                GuestKernel::ZeroCopy => ",iommu_platform=on,disable-legacy=on",
                GuestKernel::Reference => "",
            };
            args.extend([
                "-netdev".into(),
                format!("tap,id=n{i},ifname={tap},script=no,downscript=no{queues}"),
                "-device".into(),
                format!("virtio-net-pci,netdev=n{i},mac={mac},speed=10000,duplex=full{mq}{dma}"),
            ]);
        }
        args
    }

    /// Boots the guest and runs `script` (sh, as root, in the host's root filesystem, which is
    /// read-only there; `$TMPDIR` is writable) in it;
    /// returns once the guest is off.
    ///
    /// A guest kernel that panics while booting, before the script starts, is booted again
    /// (at most twice more): under TCG with several vCPUs Debian's kernel rarely dies in its
    /// first second, which says nothing about the script. Other failures are returned at once.
    pub fn run(&mut self, script: &str) -> io::Result<GuestRun> {
        const BOOTS: u32 = 3;
        for boot in 1..=BOOTS {
            match self.spawn(script)?.wait() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted && boot < BOOTS => {
                    eprintln!("xskit-testbed: booting the guest again: {e}");
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("in each of {BOOTS} boots, {e}"),
                    ));
                }
                other => return other,
            }
        }
        unreachable!("the last boot returns")
    }

    /// Boots the guest with `script` and returns at once, for tests that talk to the guest
    /// from the namespace while it runs. One boot at a time: the guest is borrowed until the
    /// run is waited for or dropped.
    pub fn spawn(&mut self, script: &str) -> io::Result<RunningGuest<'_>> {
        self.boot(script)
    }

    /// Boots the guest with `script` and waits up to `timeout` for the script to print
    /// `marker`, booting again (at most twice more) when the guest kernel panics before the
    /// script starts, as [`Guest::run`] does. Fails with the console if the marker does not
    /// come.
    pub fn spawn_until(
        &mut self,
        script: &str,
        marker: &str,
        timeout: Duration,
    ) -> io::Result<RunningGuest<'_>> {
        const BOOTS: u32 = 3;
        let this: &Guest = self;
        for boot in 1..=BOOTS {
            let mut running = this.boot(script)?;
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                if running.printed(marker) {
                    return Ok(running);
                }
                if running.exited()? {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let console = running.console();
            if running.panicked_before_script(&console) && boot < BOOTS {
                eprintln!(
                    "xskit-testbed: booting the guest again: its kernel panicked while \
                     booting:\n{}",
                    panic_lines(&console)
                );
                continue;
            }
            let output =
                std::fs::read_to_string(running.guest.job.join("share/output")).unwrap_or_default();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the guest's script did not print {marker:?} within {timeout:?} ({}); it \
                     printed:\n{output}\n--- console ---\n{}",
                    running.qemu_state(),
                    tail(&console, 40)
                ),
            ));
        }
        unreachable!("the last boot returns")
    }

    fn boot(&self, script: &str) -> io::Result<RunningGuest<'_>> {
        let share = self.job.join("share");
        if share.exists() {
            std::fs::remove_dir_all(&share)?;
        }
        std::fs::create_dir_all(&share)?;
        std::fs::write(share.join("run.sh"), script)?;
        let _ = std::fs::remove_file(self.job.join("console"));
        // `timeout` bounds the guest's life even if this process is SIGKILLed; it passes a
        // SIGTERM on to QEMU.
        let limit = self.config.timeout.as_secs().max(1) + 10;
        let (qemu, data_dirs) = qemu();
        let child = self
            .ns
            .command("timeout")
            .args(["-s", "KILL", &limit.to_string()])
            .arg(&qemu)
            .args(data_dirs)
            .args(self.qemu_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                io::Error::new(e.kind(), format!("cannot start {}: {e}", qemu.display()))
            })?;
        running(child.id(), true);
        Ok(RunningGuest {
            child: Some(child),
            guest: self,
            started: Instant::now(),
        })
    }
}

/// A guest as a bump in the wire: its NICs split into two sides, each side's TAP devices
/// bridged (in the guest's namespace) with a veth link to a host namespace of its own. Hosts
/// `a` (198.51.100.1) and `c` (198.51.100.3) share one subnet and reach each other only through
/// what the guest forwards between its sides, as through a box cabled between two switches.
/// With two or more NICs on a side, that side's bridge is the switch a bond's members plug
/// into. Dropping it removes both hosts' namespaces and the guest's.
#[derive(Debug)]
pub struct GuestWire {
    /// The guest: NICs `eth0` .. on side a, then side c's.
    pub guest: Guest,
    /// The host on side a, 198.51.100.1 on `xsk-a`.
    pub a: Host,
    /// The host on side c, 198.51.100.3 on `xsk-c`.
    pub c: Host,
    /// How many of the guest's NICs are on side a (the rest are on side c).
    pub a_nics: u32,
}

/// Side a's bridge in the guest's namespace; side c's is [`BRIDGE_C`].
pub const BRIDGE_A: &str = "xbra";
/// Side c's bridge in the guest's namespace.
pub const BRIDGE_C: &str = "xbrc";

impl GuestWire {
    /// Builds the guest (not booted) and both sides: NICs `0..a_nics` on side a, the rest
    /// on side c (each side needs at least one).
    pub fn new(config: &GuestConfig, a_nics: u32) -> io::Result<GuestWire> {
        if a_nics == 0 || a_nics >= config.nics {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a guest in the wire needs a NIC on each side: {a_nics} of {} on side a",
                    config.nics
                ),
            ));
        }
        let guest = Guest::new(config)?;
        let gns = guest.ns.name.clone();
        ip(&["-n", &gns, "addr", "flush", "dev", &guest.taps[0]])?;
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let mut guard = NsGuard(Vec::new());
        let mut side = |tag: &str, last: u8, bridge: &str, taps: &[String]| -> io::Result<Host> {
            let ns = Netns {
                name: format!("{NS_PREFIX}{pid}-{id}-{tag}"),
            };
            add_netns(&ns, false, &mut guard)?;
            let host = Host {
                ns,
                ifname: format!("xsk-{tag}"),
                ip: std::net::Ipv4Addr::new(198, 51, 100, last),
                ip6: None,
                mac: [0x02, 0x58, 0x53, 0x4b, 0x01, last],
            };
            let peer = format!("xw{tag}");
            ip(&["-n", &gns, "link", "add", bridge, "type", "bridge"])?;
            veth(&host.ifname, &host.ns.name, &host.mac, &peer, &gns)?;
            for port in taps.iter().chain(std::iter::once(&peer)) {
                ip(&["-n", &gns, "link", "set", port, "master", bridge])?;
                ip(&["-n", &gns, "link", "set", port, "up"])?;
            }
            ip(&["-n", &gns, "link", "set", bridge, "up"])?;
            let addr = format!("{}/24", host.ip);
            ip(&[
                "-n",
                &host.ns.name,
                "addr",
                "add",
                &addr,
                "dev",
                &host.ifname,
            ])?;
            ip(&["-n", &host.ns.name, "link", "set", "lo", "up"])?;
            ip(&["-n", &host.ns.name, "link", "set", &host.ifname, "up"])?;
            Ok(host)
        };
        let split = a_nics as usize;
        let a = side("a", 1, BRIDGE_A, &guest.taps[..split])?;
        let c = side("c", 3, BRIDGE_C, &guest.taps[split..])?;
        std::mem::take(&mut guard.0);
        Ok(GuestWire {
            guest,
            a,
            c,
            a_nics,
        })
    }
}

impl Drop for GuestWire {
    fn drop(&mut self) {
        drop(NsGuard(vec![
            self.a.ns.name.clone(),
            self.c.ns.name.clone(),
        ]));
    }
}

const JOB_PREFIX: &str = "xskit-guest-";

/// A shell function for guest scripts: `wait_for NAME` returns once the host called
/// [`RunningGuest::signal`] with NAME (after 120 s it fails, so a script never hangs on it).
pub const WAIT_FOR: &str = r#"wait_for() {
    n=0
    until [ -e "/run/xskit-job/$1" ]; do
        n=$((n + 1)); [ "$n" -gt 1200 ] && { echo "no signal $1 from the host"; return 1; }
        sleep 0.1
    done
}
"#;

/// Removes job directories of processes that no longer exist (stopped by a signal or
/// SIGKILL before their guests were dropped).
fn sweep_stale_jobs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(JOB_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        crate::delete_ns(&self.ns.name);
        crate::forget(&self.ns.name);
        let _ = std::fs::remove_dir_all(&self.job);
    }
}

/// A guest that is booting or running its script.
#[derive(Debug)]
pub struct RunningGuest<'a> {
    child: Option<Child>,
    guest: &'a Guest,
    started: Instant,
}

impl RunningGuest<'_> {
    /// The guest's namespace (its TAP devices' side).
    pub fn ns(&self) -> &Netns {
        &self.guest.ns
    }

    /// Whether the guest kernel panicked before the script started (its `console`): a boot
    /// that says nothing about the script, worth booting again.
    fn panicked_before_script(&self, console: &str) -> bool {
        !self.guest.job.join("share/output").exists() && console.contains("Kernel panic")
    }

    /// Whether the script's output so far contains `marker`.
    fn printed(&self, marker: &str) -> bool {
        std::fs::read_to_string(self.guest.job.join("share/output"))
            .unwrap_or_default()
            .contains(marker)
    }

    /// What became of QEMU: still running (an empty console then means a slow boot, not a
    /// failed one), or its exit status and what it said.
    fn qemu_state(&mut self) -> String {
        let Some(child) = self.child.as_mut() else {
            return "QEMU was stopped".into();
        };
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut said = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = io::Read::read_to_string(&mut e, &mut said);
                }
                format!("QEMU exited, {status}, saying: {}", said.trim())
            }
            Ok(None) => format!("QEMU still running after {:?}", self.started.elapsed()),
            Err(e) => format!("QEMU's state unknown: {e}"),
        }
    }

    /// Whether QEMU has exited (reaping it if so).
    fn exited(&mut self) -> io::Result<bool> {
        match self.child.as_mut() {
            Some(child) => Ok(child.try_wait()?.is_some()),
            None => Ok(true),
        }
    }

    /// Waits up to `timeout` for the guest's script to print a line containing `marker` (its
    /// output so far, for a script that says when it is ready); true if it did.
    pub fn wait_for_output(&self, marker: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let out =
                std::fs::read_to_string(self.guest.job.join("share/output")).unwrap_or_default();
            if out.contains(marker) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The job share on the host's side: what the script writes to `/run/xskit-job` (a
    /// capture, a report) is read here.
    pub fn share(&self) -> PathBuf {
        self.guest.share()
    }

    /// What QEMU's human monitor answers to `command` (`info network`, `info virtio-status
    /// PATH`, ...), through QEMU's QMP socket: the emulated devices' own view, for a test
    /// that finds a device doing what it should not.
    pub fn monitor(&self, command: &str) -> io::Result<String> {
        use std::io::{BufRead, BufReader, Write};
        let socket = std::os::unix::net::UnixStream::connect(self.guest.job.join("qmp.sock"))?;
        socket.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut lines = BufReader::new(socket.try_clone()?).lines();
        let mut writer = socket;
        let mut next = || {
            lines
                .next()
                .unwrap_or_else(|| Err(io::Error::other("QMP closed the connection")))
        };
        next()?;
        writer.write_all(b"{\"execute\": \"qmp_capabilities\"}\n")?;
        next()?;
        let request = serde_json::json!({
            "execute": "human-monitor-command",
            "arguments": {"command-line": command},
        });
        writer.write_all(format!("{request}\n").as_bytes())?;
        // Events may come before the answer.
        loop {
            let reply: serde_json::Value = serde_json::from_str(&next()?)?;
            if let Some(text) = reply.get("return") {
                return Ok(text.as_str().unwrap_or_default().to_string());
            }
            if let Some(error) = reply.get("error") {
                return Err(io::Error::other(error.to_string()));
            }
        }
    }

    /// Tells the script to go on: creates `name` in the job share, where the script sees it
    /// as `/run/xskit-job/NAME` (the script waits with
    /// `until [ -e /run/xskit-job/NAME ]; do sleep 0.1; done`, or [`WAIT_FOR`]).
    pub fn signal(&self, name: &str) -> io::Result<()> {
        std::fs::write(self.guest.job.join("share").join(name), b"")
    }

    /// Waits for the guest to power off (killing it at the timeout) and returns what its
    /// script did.
    pub fn wait(mut self) -> io::Result<GuestRun> {
        let mut child = self.child.take().expect("a running guest has its child");
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if self.started.elapsed() > self.guest.config.timeout {
                // Read while the guest still runs: its NICs' counters and its commands' last words.
                let taps = self.taps_seen();
                stop(&mut child);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the guest did not finish within {:?}; its script printed:\n{}\n\
                         --- its commands' standard errors ---\n{}\n--- its TAPs ---\n{taps}\n\
                         --- console ---\n{}",
                        self.guest.config.timeout,
                        std::fs::read_to_string(self.guest.job.join("share/output"))
                            .unwrap_or_default(),
                        errors_written(&self.share()),
                        tail(&self.console(), 40)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        running(child.id(), false);
        let elapsed = self.started.elapsed();
        let mut qemu_err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = io::Read::read_to_string(&mut e, &mut qemu_err);
        }
        let console = self.console();
        let share = self.guest.job.join("share");
        let Ok(code) = std::fs::read_to_string(share.join("status")) else {
            if self.panicked_before_script(&console) {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    format!(
                        "the guest's kernel panicked while booting, before the script \
                         started: {}\n--- console ---\n{}",
                        console
                            .lines()
                            .find(|l| l.contains("Kernel panic"))
                            .unwrap_or_default()
                            .trim(),
                        tail(&console, 20)
                    ),
                ));
            }
            return Err(io::Error::other(format!(
                "the guest stopped ({status}) before its script finished; QEMU said: {}\n\
                 --- console ---\n{}",
                qemu_err.trim(),
                tail(&console, 40)
            )));
        };
        Ok(GuestRun {
            status: code.trim().parse().unwrap_or(-1),
            output: std::fs::read_to_string(share.join("output")).unwrap_or_default(),
            console,
            elapsed,
        })
    }

    /// What the script has printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.guest.job.join("share/output")).unwrap_or_default()
    }

    /// The host's counters of the guest's TAP devices (`ip -s -s link`).
    pub fn taps_seen(&self) -> String {
        self.guest
            .taps()
            .iter()
            .map(|tap| {
                let out = self
                    .ns()
                    .command("ip")
                    .args(["-s", "-s", "link", "show", tap])
                    .output();
                out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_else(|e| format!("({tap}: {e})\n"))
            })
            .collect()
    }

    /// The guest's serial console so far (kernel messages).
    pub fn console(&self) -> String {
        std::fs::read(self.guest.job.join("console"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

/// QEMUs (their `timeout` wrappers) running now, for the signal handler.
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn running(pid: u32, alive: bool) {
    let mut all = RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    all.retain(|&p| p != pid);
    if alive {
        all.push(pid);
    }
}

/// Stops every guest this process runs (for SIGINT and SIGTERM).
pub(crate) fn stop_all() {
    let pids = std::mem::take(
        &mut *RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// SIGTERM to `timeout`, which passes it on to QEMU; SIGKILL if that is not enough.
fn stop(child: &mut Child) {
    running(child.id(), false);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The console's lines around its kernel panic: what panicked, and the lines before.
fn panic_lines(console: &str) -> String {
    let lines: Vec<&str> = console.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("Kernel panic"))
        .unwrap_or(lines.len());
    lines[at.saturating_sub(8)..(at + 4).min(lines.len())].join("\n")
}

impl Drop for RunningGuest<'_> {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop(&mut child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_directories_of_dead_processes_are_swept() {
        let dead = std::env::temp_dir().join(format!("{JOB_PREFIX}{}-0", u32::MAX));
        let ours = std::env::temp_dir().join(format!("{JOB_PREFIX}{}-999999", std::process::id()));
        std::fs::create_dir_all(dead.join("share")).unwrap();
        std::fs::create_dir_all(&ours).unwrap();
        sweep_stale_jobs();
        assert!(!dead.exists(), "a dead process's directory is removed");
        assert!(ours.exists(), "a live process's directory stays");
        std::fs::remove_dir_all(&ours).unwrap();
    }
}
