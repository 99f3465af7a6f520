//! The device allow-list on cgroup v2, which has no `devices` controller:
//! an eBPF program of type `BPF_PROG_TYPE_CGROUP_DEVICE` attached to the
//! task's cgroup answers every open and mknod of a device node. The kernel
//! calls it with `struct bpf_cgroup_dev_ctx { access_type, major, minor }`
//! (`access_type` = access bits << 16 | device type) and allows the access
//! only if it returns 1.
//!
//! The program is generated from the rules, one block per rule; reading the
//! attached program back from the kernel and decoding it gives the rules the
//! kernel really enforces (see [`read_back`]).

use crate::error::ExecutorError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// What kind of device node a rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Char,
    Block,
    Any,
}

/// One allowed (kind, major, minor, access) set; `None` is a wildcard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRule {
    pub kind: DeviceKind,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    /// [`MKNOD`] | [`READ`] | [`WRITE`].
    pub access: u32,
}

/// A device node every task's `/dev` holds, made there with mknod (runc's
/// default devices; the task never sees a host inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevNode {
    pub name: &'static str,
    pub major: u32,
    pub minor: u32,
}

/// The task's `/dev` nodes, world readable and writable as on any host.
pub const DEV_NODES: [DevNode; 6] = [
    dev_node("null", 1, 3),
    dev_node("zero", 1, 5),
    dev_node("full", 1, 7),
    dev_node("random", 1, 8),
    dev_node("urandom", 1, 9),
    dev_node("tty", 5, 0),
];

const fn dev_node(name: &'static str, major: u32, minor: u32) -> DevNode {
    DevNode { name, major, minor }
}

/// What a task may do with device nodes: runc's default allow-list less
/// `/dev/console` and `/dev/net/tun`, which a task here never gets. Creating
/// any node is allowed (a root task keeps CAP_MKNOD); opening one is allowed
/// only for these character devices. The one home of the list, for both
/// cgroup versions.
pub const DEFAULT_DEVICES: [DeviceRule; 10] = [
    any_node(DeviceKind::Char),
    any_node(DeviceKind::Block),
    node_rule(DEV_NODES[0]),
    node_rule(DEV_NODES[1]),
    node_rule(DEV_NODES[2]),
    node_rule(DEV_NODES[3]),
    node_rule(DEV_NODES[4]),
    node_rule(DEV_NODES[5]),
    char_dev(5, Some(2)), // ptmx
    char_dev(136, None),  // the task's own ptys
];

const fn any_node(kind: DeviceKind) -> DeviceRule {
    DeviceRule {
        kind,
        major: None,
        minor: None,
        access: MKNOD,
    }
}

const fn node_rule(node: DevNode) -> DeviceRule {
    char_dev(node.major, Some(node.minor))
}

const fn char_dev(major: u32, minor: Option<u32>) -> DeviceRule {
    DeviceRule {
        kind: DeviceKind::Char,
        major: Some(major),
        minor,
        access: MKNOD | READ | WRITE,
    }
}

impl DeviceRule {
    /// The rule as cgroup v1's `devices.allow` and `devices.list` write it,
    /// e.g. `c 1:3 rwm` or `b *:* m`.
    pub fn v1_entry(&self) -> String {
        let kind = match self.kind {
            DeviceKind::Char => 'c',
            DeviceKind::Block => 'b',
            DeviceKind::Any => 'a',
        };
        let number = |n: Option<u32>| n.map_or("*".to_string(), |n| n.to_string());
        let access: String = [(READ, 'r'), (WRITE, 'w'), (MKNOD, 'm')]
            .iter()
            .filter(|(bit, _)| self.access & bit != 0)
            .map(|(_, c)| *c)
            .collect();
        format!(
            "{kind} {}:{} {access}",
            number(self.major),
            number(self.minor)
        )
    }
}

pub const MKNOD: u32 = 1;
pub const READ: u32 = 2;
pub const WRITE: u32 = 4;
const ALL_ACCESS: u32 = MKNOD | READ | WRITE;

// The kernel's device types in `access_type`.
const DEVCG_BLOCK: i32 = 1;
const DEVCG_CHAR: i32 = 2;

/// One eBPF instruction, as `struct bpf_insn` lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Insn {
    code: u8,
    /// dst in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

// The opcodes the program uses.
const LDX_MEM_W: u8 = 0x61; // dst = *(u32 *)(src + off)
const MOV64_REG: u8 = 0xbf; // dst = src
const MOV64_IMM: u8 = 0xb7; // dst = imm
const AND64_IMM: u8 = 0x57; // dst &= imm
const RSH64_IMM: u8 = 0x77; // dst >>= imm
const JNE_IMM: u8 = 0x55; // if dst != imm: pc += off
const EXIT: u8 = 0x95;

// Registers: r1 is the context; the rest hold its fields.
const CTX: u8 = 1;
const TYPE: u8 = 2;
const ACCESS: u8 = 3;
const MAJOR: u8 = 4;
const MINOR: u8 = 5;
const SCRATCH: u8 = 6;
const RET: u8 = 0;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// The program for `rules`: allow (return 1) if any rule matches, else deny.
pub fn program(rules: &[DeviceRule]) -> Vec<Insn> {
    let mut p = prologue().to_vec();
    for rule in rules {
        emit_rule(&mut p, rule);
    }
    p.extend(verdict(0));
    p
}

/// Loads the context's fields into registers.
fn prologue() -> [Insn; 6] {
    [
        insn(LDX_MEM_W, TYPE, CTX, 0, 0),
        insn(MOV64_REG, ACCESS, TYPE, 0, 0),
        insn(AND64_IMM, TYPE, 0, 0, 0xffff),
        insn(RSH64_IMM, ACCESS, 0, 0, 16),
        insn(LDX_MEM_W, MAJOR, CTX, 4, 0),
        insn(LDX_MEM_W, MINOR, CTX, 8, 0),
    ]
}

fn verdict(allow: i32) -> [Insn; 2] {
    [insn(MOV64_IMM, RET, 0, 0, allow), insn(EXIT, 0, 0, 0, 0)]
}

/// One block per rule: every check that fails jumps past the block; a
/// block whose checks all pass allows the access.
fn emit_rule(p: &mut Vec<Insn>, rule: &DeviceRule) {
    let mut jumps = Vec::new();
    let mut unless_equal = |p: &mut Vec<Insn>, reg: u8, value: i32| {
        jumps.push(p.len());
        p.push(insn(JNE_IMM, reg, 0, 0, value));
    };
    match rule.kind {
        DeviceKind::Char => unless_equal(p, TYPE, DEVCG_CHAR),
        DeviceKind::Block => unless_equal(p, TYPE, DEVCG_BLOCK),
        DeviceKind::Any => {}
    }
    if rule.access & ALL_ACCESS != ALL_ACCESS {
        // Any asked-for access bit outside the allowed ones fails the rule.
        p.push(insn(MOV64_REG, SCRATCH, ACCESS, 0, 0));
        p.push(insn(
            AND64_IMM,
            SCRATCH,
            0,
            0,
            (ALL_ACCESS & !rule.access) as i32,
        ));
        unless_equal(p, SCRATCH, 0);
    }
    if let Some(major) = rule.major {
        unless_equal(p, MAJOR, major as i32);
    }
    if let Some(minor) = rule.minor {
        unless_equal(p, MINOR, minor as i32);
    }
    p.extend(verdict(1));
    let end = p.len();
    for j in jumps {
        p[j].off = (end - (j + 1)) as i16;
    }
}

/// The rules `program` was generated from, or `None` if `insns` is not such
/// a program (another tool's filter, or one the kernel changed).
pub fn decode(insns: &[Insn]) -> Option<Vec<DeviceRule>> {
    let rest = insns.strip_prefix(&prologue()[..])?;
    let mut rules = Vec::new();
    let mut pc = 0;
    loop {
        if rest[pc..] == verdict(0) {
            return Some(rules);
        }
        let mut rule = DeviceRule {
            kind: DeviceKind::Any,
            major: None,
            minor: None,
            access: ALL_ACCESS,
        };
        loop {
            let i = *rest.get(pc)?;
            if rest.get(pc..pc + 2)? == verdict(1) {
                pc += 2;
                break;
            }
            let dst = i.regs & 0xf;
            match (i.code, dst) {
                (JNE_IMM, TYPE) if i.imm == DEVCG_CHAR => rule.kind = DeviceKind::Char,
                (JNE_IMM, TYPE) if i.imm == DEVCG_BLOCK => rule.kind = DeviceKind::Block,
                (MOV64_REG, SCRATCH) => {}
                (AND64_IMM, SCRATCH) => rule.access = ALL_ACCESS & !(i.imm as u32),
                (JNE_IMM, SCRATCH) => {}
                (JNE_IMM, MAJOR) => rule.major = Some(i.imm as u32),
                (JNE_IMM, MINOR) => rule.minor = Some(i.imm as u32),
                _ => return None,
            }
            pc += 1;
        }
        rules.push(rule);
    }
}

// bpf(2) commands, program and attach types, flags (include/uapi/linux/bpf.h).
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
/// Lets other programs (a service manager's) stay attached beside ours; the
/// kernel then requires every one of them to allow an access.
const BPF_F_ALLOW_MULTI: u32 = 2;

/// The part of `union bpf_attr` that BPF_PROG_LOAD reads.
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
}

/// The part of `union bpf_attr` that BPF_PROG_ATTACH reads.
#[repr(C)]
#[derive(Default)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
}

/// The part of `union bpf_attr` that BPF_PROG_QUERY uses.
#[repr(C)]
#[derive(Default)]
struct ProgQuery {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
}

/// The part of `union bpf_attr` that BPF_PROG_GET_FD_BY_ID reads.
#[repr(C)]
#[derive(Default)]
struct GetFdById {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// The part of `union bpf_attr` that BPF_OBJ_GET_INFO_BY_FD reads.
#[repr(C)]
#[derive(Default)]
struct GetInfo {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_prog_info`, up to the translated instructions.
#[repr(C)]
#[derive(Default)]
struct ProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T, what: &str) -> Result<i64, ExecutorError> {
    // SAFETY: `attr` is a live, fully initialised #[repr(C)] prefix of
    // `union bpf_attr` and its size is passed along; pointers inside it
    // point at buffers that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(ExecutorError::Cgroup(format!(
            "bpf({what}): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(rc)
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: bpf(2) just returned this new fd and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

fn open_dir(dir: &Path) -> Result<std::fs::File, ExecutorError> {
    std::fs::File::open(dir).map_err(ExecutorError::io(format!("open {}", dir.display())))
}

/// Loads the program for `rules` and attaches it to the cgroup at `dir`,
/// where it stays until the cgroup is removed.
pub fn attach(dir: &Path, rules: &[DeviceRule]) -> Result<(), ExecutorError> {
    let insns = program(rules);
    let license = c"GPL";
    let mut load = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..ProgLoad::default()
    };
    let prog = owned(bpf(BPF_PROG_LOAD, &mut load, "load the device filter")?);
    let cgroup = open_dir(dir)?;
    let mut attach = ProgAttach {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
    };
    bpf(BPF_PROG_ATTACH, &mut attach, "attach the device filter")?;
    Ok(())
}

/// The device rules the kernel enforces on the cgroup at `dir`: each
/// attached device program, read back and decoded. A program that is not
/// ours reads as an error, so nothing unknown passes as an allow-list.
pub fn read_back(dir: &Path) -> Result<Vec<Vec<DeviceRule>>, ExecutorError> {
    let cgroup = open_dir(dir)?;
    let mut ids = [0u32; 16];
    let mut query = ProgQuery {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: ids.len() as u32,
        ..ProgQuery::default()
    };
    bpf(BPF_PROG_QUERY, &mut query, "query the device filters")?;
    let mut programs = Vec::new();
    for &id in &ids[..query.prog_cnt as usize] {
        let mut by_id = GetFdById {
            prog_id: id,
            ..GetFdById::default()
        };
        let prog = owned(bpf(
            BPF_PROG_GET_FD_BY_ID,
            &mut by_id,
            "open a device filter",
        )?);
        // First ask how long the program is, then fetch it.
        let mut info = ProgInfo::default();
        let mut get = GetInfo {
            bpf_fd: prog.as_raw_fd() as u32,
            info_len: std::mem::size_of::<ProgInfo>() as u32,
            info: &mut info as *mut ProgInfo as u64,
        };
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut get, "size a device filter")?;
        let mut insns = vec![Insn::default(); info.xlated_prog_len as usize / 8];
        info = ProgInfo {
            xlated_prog_len: (insns.len() * 8) as u32,
            xlated_prog_insns: insns.as_mut_ptr() as u64,
            ..ProgInfo::default()
        };
        get.info = &mut info as *mut ProgInfo as u64;
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut get, "read a device filter")?;
        let rules = decode(&insns).ok_or_else(|| {
            ExecutorError::Cgroup(format!(
                "{}: device program {id} is not a taskgate allow-list",
                dir.display()
            ))
        })?;
        programs.push(rules);
    }
    Ok(programs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(kind: DeviceKind, major: Option<u32>, minor: Option<u32>, access: u32) -> DeviceRule {
        DeviceRule {
            kind,
            major,
            minor,
            access,
        }
    }

    /// Runs the program the way the kernel would, on one access.
    fn run(p: &[Insn], kind: i32, access: u32, major: u32, minor: u32) -> i64 {
        let ctx = [((access << 16) | kind as u32), major, minor];
        let mut r = [0i64; 11];
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                LDX_MEM_W => r[dst] = ctx[i.off as usize / 4] as i64,
                MOV64_REG => r[dst] = r[src],
                MOV64_IMM => r[dst] = i.imm as i64,
                AND64_IMM => r[dst] &= i.imm as i64,
                RSH64_IMM => r[dst] = ((r[dst] as u64) >> i.imm) as i64,
                JNE_IMM if r[dst] != i.imm as i64 => pc += i.off as usize,
                JNE_IMM => {}
                EXIT => return r[0],
                other => panic!("unknown opcode {other:#x}"),
            }
        }
    }

    fn sample() -> Vec<DeviceRule> {
        vec![
            rule(DeviceKind::Char, Some(1), Some(3), READ | WRITE),
            rule(DeviceKind::Char, Some(136), None, ALL_ACCESS),
            rule(DeviceKind::Any, None, None, MKNOD),
        ]
    }

    #[test]
    fn the_program_allows_exactly_the_rules() {
        let p = program(&sample());
        assert_eq!(run(&p, DEVCG_CHAR, READ | WRITE, 1, 3), 1, "/dev/null rw");
        assert_eq!(
            run(&p, DEVCG_CHAR, MKNOD | READ, 1, 3),
            0,
            "no one rule allows both"
        );
        assert_eq!(
            run(&p, DEVCG_CHAR, MKNOD, 1, 3),
            1,
            "mknod alone, by the last rule"
        );
        assert_eq!(run(&p, DEVCG_CHAR, READ, 1, 4), 0, "another minor");
        assert_eq!(
            run(&p, DEVCG_BLOCK, READ, 1, 3),
            0,
            "a block device with the same numbers"
        );
        assert_eq!(run(&p, DEVCG_CHAR, WRITE, 136, 7), 1, "any pts");
        assert_eq!(run(&p, DEVCG_BLOCK, READ, 8, 0), 0, "a disk");
        assert_eq!(run(&p, DEVCG_BLOCK, MKNOD, 8, 0), 1, "mknod of anything");
        assert_eq!(
            run(&program(&[]), DEVCG_CHAR, READ, 1, 3),
            0,
            "no rules, no access"
        );
    }

    #[test]
    fn rules_render_as_cgroup_v1_entries() {
        let entries: Vec<String> = sample().iter().map(DeviceRule::v1_entry).collect();
        assert_eq!(entries, ["c 1:3 rw", "c 136:* rwm", "a *:* m"]);
    }

    #[test]
    fn a_program_decodes_to_its_rules() {
        let rules = sample();
        assert_eq!(decode(&program(&rules)), Some(rules));
        assert_eq!(decode(&program(&[])), Some(vec![]));
        let mut foreign = program(&sample());
        foreign[7].imm = 12345;
        foreign[6].code = 0x07;
        assert_eq!(decode(&foreign), None);
        assert_eq!(decode(&[]), None);
    }
}
