//! The deny list ([`RULES`]) as a Docker seccomp profile, for the Docker
//! backend: `docker create --security-opt seccomp=FILE` (the CLI reads the
//! file and sends its content; runc compiles it with libseccomp).
//!
//! The profile is `defaultAction: SCMP_ACT_ALLOW` with one entry per refusal,
//! `SCMP_ACT_ERRNO` with the rule's errno: Docker has no listener, so
//! [`Action::Notify`] rules are plain errno returns there (nothing recorded).
//! [`When::Unguarded`] rules are included (Docker has no creation guard:
//! `openat2` is `ENOSYS`).
//!
//! How conditions are written, and why:
//! - **Low 32 bits.** libseccomp compares 64-bit arguments; the native filter
//!   compares the low 32 bits (what the kernel acts on, see the module docs).
//!   Every comparison here is `SCMP_CMP_MASKED_EQ` with a mask of at most
//!   32 bits (`(arg & mask) == value`), so the high half never matters:
//!   `TIOCSTI | 1 << 32` is refused as `TIOCSTI`, as natively.
//! - **One comparison per argument per entry.** runc (`matchCall`) turns an
//!   entry with two comparisons on the same argument into one rule *per
//!   comparison* (an OR: libseccomp before 2.5 rejected the AND), so "not 1
//!   and not 2" would refuse everything. Each argument condition is instead
//!   a union of ternary cubes (`(arg & mask) == value`): `Eq` one cube,
//!   `AnyBit` one per bit, `NotIn`/`MaskedNotIn` the complement of the values
//!   as a bit trie (at most 32 cubes per value). An entry is one cube per
//!   argument (ANDed), so a rule becomes the product of its arguments' cubes.
//! - **First rule decides.** Natively the first rule of a syscall whose
//!   condition holds picks the errno (`socket`: the family's `EAFNOSUPPORT`
//!   before the type's `EPERM` before the protocol's `EPROTONOSUPPORT`).
//!   libseccomp has no such order for overlapping rules, so each rule's
//!   entries exclude the cases of every earlier rule of the syscall with
//!   another errno (rules with the same errno may overlap: either gives the
//!   same answer).
//! - **Names** are libseccomp's (the libc name without `SYS_`). runc skips a
//!   name its libseccomp does not know (only a debug log; the container
//!   starts), and with a default allow such a call is then allowed.
//!   [`UNKNOWN_TO_LIBSECCOMP`] lists the rules' names libseccomp 2.5.4 of
//!   Debian 12's Docker 20.10 does not know (checked on that engine, where
//!   `fchmodat2` is known and refused); upstream libseccomp knows
//!   `fchmodat2` from 2.5.5.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::table::{ArgCond, Rule, RULES};

/// Names of [`RULES`] that libseccomp 2.5.4 (Debian 12) cannot resolve: an
/// engine whose runc links it leaves them unfiltered. `open_tree_attr`
/// (Linux 6.15) without `OPEN_TREE_CLONE` only opens a path fd, and a clone
/// needs `CAP_SYS_ADMIN`, which the container does not have (`--cap-drop ALL`).
pub const UNKNOWN_TO_LIBSECCOMP: &[&str] = &["open_tree_attr"];

/// `(x & mask) == value` on the low 32 bits (`value & !mask == 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Cube {
    mask: u32,
    value: u32,
}

impl Cube {
    fn and(self, o: Cube) -> Option<Cube> {
        ((self.value ^ o.value) & self.mask & o.mask == 0).then_some(Cube {
            mask: self.mask | o.mask,
            value: self.value | o.value,
        })
    }

    /// Every `x` of `o` is in `self`.
    fn covers(self, o: Cube) -> bool {
        self.mask & o.mask == self.mask && o.value & self.mask == self.value
    }
}

/// A condition on one argument: `(x & mask) ∈ values`, or `∉` when `negated`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ArgSet {
    mask: u32,
    values: Vec<u32>,
    negated: bool,
}

impl ArgSet {
    fn not(&self) -> ArgSet {
        ArgSet {
            negated: !self.negated,
            ..self.clone()
        }
    }

    fn cubes(&self) -> Vec<Cube> {
        let mut values: Vec<u32> = self.values.iter().map(|v| v & self.mask).collect();
        values.sort_unstable();
        values.dedup();
        if !self.negated {
            return values
                .into_iter()
                .map(|value| Cube {
                    mask: self.mask,
                    value,
                })
                .collect();
        }
        let bits: Vec<u32> = (0..32)
            .rev()
            .map(|b| 1u32 << b)
            .filter(|b| self.mask & b != 0)
            .collect();
        let mut out = Vec::new();
        complement(&bits, Cube { mask: 0, value: 0 }, &values, &mut out);
        out
    }
}

/// The cubes under `prefix` (splitting on `bits`, highest first) holding
/// none of `values` (all of which match `prefix`).
fn complement(bits: &[u32], prefix: Cube, values: &[u32], out: &mut Vec<Cube>) {
    if values.is_empty() {
        out.push(prefix);
        return;
    }
    let Some((&b, rest)) = bits.split_first() else {
        return;
    };
    for side in [0, b] {
        let sub: Vec<u32> = values.iter().copied().filter(|v| v & b == side).collect();
        let next = Cube {
            mask: prefix.mask | b,
            value: prefix.value | side,
        };
        complement(rest, next, &sub, out);
    }
}

/// A conjunction: per argument, every set holds.
type Conj = BTreeMap<u8, Vec<ArgSet>>;

fn atoms(cond: ArgCond, out: &mut Conj) {
    let (arg, set) = match cond {
        ArgCond::AnyBit { arg, mask } => (
            arg,
            ArgSet {
                mask,
                values: vec![0],
                negated: true,
            },
        ),
        ArgCond::Eq { arg, value } => (
            arg,
            ArgSet {
                mask: u32::MAX,
                values: vec![value],
                negated: false,
            },
        ),
        ArgCond::NotIn { arg, values } => (
            arg,
            ArgSet {
                mask: u32::MAX,
                values: values.to_vec(),
                negated: true,
            },
        ),
        ArgCond::MaskedNotIn { arg, mask, values } => (
            arg,
            ArgSet {
                mask,
                values: values.to_vec(),
                negated: true,
            },
        ),
        ArgCond::All(all) => {
            for c in all {
                atoms(*c, out);
            }
            return;
        }
    };
    out.entry(arg).or_default().push(set);
}

fn conj(rule: &Rule) -> Conj {
    let mut c = Conj::new();
    if let Some(cond) = rule.cond {
        atoms(cond, &mut c);
    }
    c
}

/// `a` without the cases of `b`: a union of conjunctions.
fn minus(a: &Conj, b: &Conj) -> Vec<Conj> {
    b.iter()
        .flat_map(|(arg, sets)| sets.iter().map(move |s| (*arg, s.not())))
        .map(|(arg, s)| {
            let mut c = a.clone();
            c.entry(arg).or_default().push(s);
            c
        })
        .collect()
}

/// The union of cubes where every set of one argument holds, minimal-ish:
/// intersected, covered cubes dropped, pairs differing in one bit merged.
fn arg_cubes(sets: &[ArgSet]) -> Vec<Cube> {
    let mut acc = vec![Cube { mask: 0, value: 0 }];
    for s in sets {
        let cubes = s.cubes();
        acc = acc
            .iter()
            .flat_map(|a| cubes.iter().filter_map(move |c| a.and(*c)))
            .collect();
    }
    loop {
        acc.sort_unstable();
        acc.dedup();
        let before = acc.clone();
        let mut merged: Option<(usize, usize, Cube)> = None;
        'find: for (i, x) in acc.iter().enumerate() {
            for (j, y) in acc.iter().enumerate().skip(i + 1) {
                let diff = x.value ^ y.value;
                if x.mask == y.mask && diff.count_ones() == 1 {
                    let mask = x.mask & !diff;
                    merged = Some((
                        i,
                        j,
                        Cube {
                            mask,
                            value: x.value & mask,
                        },
                    ));
                    break 'find;
                }
            }
        }
        if let Some((i, j, c)) = merged {
            acc.remove(j);
            acc[i] = c;
        }
        let snapshot = acc.clone();
        acc.retain(|c| !snapshot.iter().any(|o| o != c && o.covers(*c)));
        if acc == before {
            return acc;
        }
    }
}

/// The profile's entries for one conjunction: the product of its
/// arguments' cubes, each as `[index, mask, value]`.
fn entries(c: &Conj) -> Vec<Vec<(u8, Cube)>> {
    let mut out: Vec<Vec<(u8, Cube)>> = vec![Vec::new()];
    for (arg, sets) in c {
        let cubes = arg_cubes(sets);
        out = out
            .iter()
            .flat_map(|e| {
                cubes.iter().map(move |cube| {
                    let mut e = e.clone();
                    if cube.mask != 0 {
                        e.push((*arg, *cube));
                    }
                    e
                })
            })
            .collect();
    }
    out
}

/// Docker's names of the architectures the profile covers: the native one
/// and its compat ABIs (the native filter kills those outright; a profile
/// lists them so their numbers meet the same rules).
pub fn docker_architectures() -> &'static [&'static str] {
    if cfg!(target_arch = "aarch64") {
        &["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]
    } else {
        &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    }
}

/// One profile entry: syscall name, errno, `(index, mask, value)` comparisons.
type Refusal = (&'static str, i32, Vec<(u8, u32, u32)>);

/// Each rule of `rules` as `(name, errno, args)` entries, args as
/// `(index, mask, value)`; see the module docs.
fn refusals(rules: &[Rule]) -> Vec<Refusal> {
    let mut out = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let errno = rule.action.errno();
        let mut region = vec![conj(rule)];
        for earlier in rules[..i]
            .iter()
            .filter(|e| e.name == rule.name && e.action.errno() != errno)
        {
            let b = conj(earlier);
            region = region.iter().flat_map(|a| minus(a, &b)).collect();
        }
        let name = rule.name.trim_start_matches("SYS_");
        let mut seen = Vec::new();
        for entry in region.iter().flat_map(entries) {
            let args: Vec<(u8, u32, u32)> =
                entry.iter().map(|(a, c)| (*a, c.mask, c.value)).collect();
            if !seen.contains(&args) {
                seen.push(args.clone());
                out.push((name, errno, args));
            }
        }
    }
    out
}

/// The Docker seccomp profile of the deny list: default allow, every rule of
/// [`RULES`] an `SCMP_ACT_ERRNO` entry (see the module docs). Unconditional
/// entries of one errno share an entry.
pub fn docker_profile() -> Value {
    let mut syscalls: Vec<Value> = Vec::new();
    let mut plain: BTreeMap<i32, Vec<&str>> = BTreeMap::new();
    let mut conditional = Vec::new();
    for (name, errno, args) in refusals(RULES) {
        if args.is_empty() {
            let names = plain.entry(errno).or_default();
            if !names.contains(&name) {
                names.push(name);
            }
        } else {
            conditional.push((name, errno, args));
        }
    }
    for (errno, names) in plain {
        syscalls.push(json!({"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": errno}));
    }
    for (name, errno, args) in conditional {
        let args: Vec<Value> = args
            .iter()
            .map(|(index, mask, value)| {
                json!({"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"})
            })
            .collect();
        syscalls.push(json!({
            "names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": errno, "args": args,
        }));
    }
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": docker_architectures(),
        "syscalls": syscalls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The profile's entries: names, errno, `(index, mask, value)` comparisons.
    type Entries = Vec<(Vec<String>, i64, Vec<(usize, u64, u64)>)>;

    fn parse(profile: &Value) -> Entries {
        profile["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                assert_eq!(s["action"], "SCMP_ACT_ERRNO");
                let names = s["names"].as_array().unwrap();
                let args = s["args"].as_array().map_or(Vec::new(), |conds| {
                    conds
                        .iter()
                        .map(|c| {
                            assert_eq!(c["op"], "SCMP_CMP_MASKED_EQ");
                            (
                                c["index"].as_u64().unwrap() as usize,
                                c["value"].as_u64().unwrap(),
                                c["valueTwo"].as_u64().unwrap(),
                            )
                        })
                        .collect()
                });
                (
                    names
                        .iter()
                        .map(|n| n.as_str().unwrap().to_owned())
                        .collect(),
                    s["errnoRet"].as_i64().unwrap(),
                    args,
                )
            })
            .collect()
    }

    /// What the profile answers for `name(args)`, as libseccomp would for any
    /// order of overlapping entries: every matching entry's errno.
    fn errnos(entries: &Entries, name: &str, args: &[u64; 6]) -> Vec<i64> {
        let mut out: Vec<i64> = entries
            .iter()
            .filter(|(names, _, conds)| {
                names.iter().any(|n| n == name)
                    && conds
                        .iter()
                        .all(|&(i, mask, value)| args[i] & mask == value)
            })
            .map(|(_, e, _)| *e)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn profile_errnos(profile: &Value, name: &str, args: &[u64; 6]) -> Vec<i64> {
        errnos(&parse(profile), name, args)
    }

    /// The native answer: the first rule of the syscall whose condition holds.
    fn native_errno(nr: libc::c_long, args: &[u64; 6]) -> Option<i64> {
        RULES
            .iter()
            .filter(|r| r.nr == nr)
            .find(|r| r.cond.is_none_or(|c| c.holds(args)))
            .map(|r| i64::from(r.action.errno()))
    }

    /// Values worth trying for one argument: every value a rule names, with
    /// its neighbours, every single bit, the masks, and each with high bits.
    fn samples() -> Vec<u64> {
        fn collect(c: ArgCond, v: &mut Vec<u32>) {
            match c {
                ArgCond::AnyBit { mask, .. } => {
                    v.extend([mask, mask & mask.wrapping_neg(), !mask]);
                }
                ArgCond::Eq { value, .. } => v.push(value),
                ArgCond::NotIn { values, .. } => v.extend(values),
                ArgCond::MaskedNotIn { mask, values, .. } => {
                    v.extend(values);
                    v.extend(values.iter().map(|x| x | !mask));
                    v.extend(values.iter().map(|x| x | (libc::SOCK_NONBLOCK as u32)));
                }
                ArgCond::All(all) => all.iter().for_each(|c| collect(*c, v)),
            }
        }
        let mut v: Vec<u32> = vec![0, u32::MAX, 0o4755, 0o2755, 0o755, 0o644, 0o6000];
        v.extend((0..32).map(|b| 1u32 << b));
        v.extend(0..64);
        for r in RULES {
            if let Some(c) = r.cond {
                collect(c, &mut v);
            }
        }
        let near: Vec<u32> = v
            .iter()
            .flat_map(|x| [x.wrapping_sub(1), *x, x.wrapping_add(1)])
            .collect();
        let mut out: Vec<u64> = near
            .iter()
            .flat_map(|&x| {
                [
                    u64::from(x),
                    u64::from(x) | 1 << 32,
                    u64::from(x) | 0xffff_ffff << 32,
                ]
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    #[test]
    fn the_profile_refuses_what_the_native_filter_refuses_with_its_errno() {
        let entries = parse(&docker_profile());
        let samples = samples();
        let mut checked = 0usize;
        let mut nrs: Vec<(libc::c_long, &str)> = RULES
            .iter()
            .map(|r| (r.nr, r.name.trim_start_matches("SYS_")))
            .collect();
        nrs.sort_unstable();
        nrs.dedup();
        for (nr, name) in nrs {
            let args_used: Vec<usize> = {
                let mut a: Vec<usize> = RULES
                    .iter()
                    .filter(|r| r.nr == nr)
                    .filter_map(|r| r.cond)
                    .flat_map(|c| {
                        let mut v = Vec::new();
                        fn args(c: ArgCond, v: &mut Vec<usize>) {
                            match c {
                                ArgCond::All(all) => all.iter().for_each(|c| args(*c, v)),
                                c => v.push(usize::from(c.arg())),
                            }
                        }
                        args(c, &mut v);
                        v
                    })
                    .collect();
                a.sort_unstable();
                a.dedup();
                a
            };
            // Every combination of samples over the arguments the rules read
            // (socket's three: a coarser grid to stay fast).
            let grid: Vec<u64> = if args_used.len() > 2 {
                samples
                    .iter()
                    .copied()
                    .step_by(11)
                    .chain([0, 1, 2, 3, 5, 6, 10, 17, 58, 0x80801])
                    .collect()
            } else {
                samples.clone()
            };
            let mut vectors: Vec<[u64; 6]> = vec![[0; 6]];
            for &arg in &args_used {
                vectors = vectors
                    .iter()
                    .flat_map(|v| {
                        grid.iter().map(move |&x| {
                            let mut v = *v;
                            v[arg] = x;
                            v
                        })
                    })
                    .collect();
            }
            for args in vectors {
                let want: Vec<i64> = native_errno(nr, &args).into_iter().collect();
                assert_eq!(errnos(&entries, name, &args), want, "{name}{args:x?}");
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn every_rule_is_in_the_profile_and_no_entry_compares_an_argument_twice() {
        let profile = docker_profile();
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ALLOW");
        assert!(profile["architectures"].as_array().unwrap().len() >= 2);
        let syscalls = profile["syscalls"].as_array().unwrap();
        for r in RULES {
            let name = r.name.trim_start_matches("SYS_");
            assert!(
                syscalls
                    .iter()
                    .any(|s| s["names"].as_array().unwrap().iter().any(|n| n == name)),
                "{name}"
            );
        }
        for s in syscalls {
            let mut idx: Vec<u64> = s["args"]
                .as_array()
                .map(|a| a.iter().map(|c| c["index"].as_u64().unwrap()).collect())
                .unwrap_or_default();
            let n = idx.len();
            idx.sort_unstable();
            idx.dedup();
            assert_eq!(idx.len(), n, "{s}");
            for c in s["args"].as_array().into_iter().flatten() {
                assert!(c["value"].as_u64().unwrap() <= u64::from(u32::MAX), "{c}");
            }
        }
        // The set-id rules, concretely: chmod(path, 04755) and (02755) refused.
        let e = i64::from(libc::EPERM);
        for mode in [0o4755u64, 0o2755, 0o6000, 0o4000 | 1 << 40] {
            assert_eq!(
                profile_errnos(&profile, "fchmodat", &[0, 0, mode, 0, 0, 0]),
                [e]
            );
            assert_eq!(
                profile_errnos(&profile, "fchmod", &[0, mode, 0, 0, 0, 0]),
                [e]
            );
        }
        assert!(profile_errnos(&profile, "fchmodat", &[0, 0, 0o755, 0, 0, 0]).is_empty());
        assert_eq!(
            profile_errnos(&profile, "openat2", &[0; 6]),
            [i64::from(libc::ENOSYS)]
        );
    }

    #[test]
    fn cubes_of_a_complement_are_exact() {
        let s = ArgSet {
            mask: 0xf,
            values: vec![1, 2],
            negated: true,
        };
        let cubes = s.cubes();
        for x in 0..64u32 {
            let inside = cubes.iter().any(|c| x & c.mask == c.value);
            assert_eq!(inside, ![1, 2].contains(&(x & 0xf)), "{x}");
        }
    }
}
