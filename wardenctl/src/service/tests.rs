use super::*;

/// The files under `packaging/` are the generators' output for the
/// documented defaults ([`ServiceValues::packaged`]): neither changes without
/// the other. After changing a generator, rewrite them with
/// `cargo test -p wardenctl -- --ignored regenerate_packaging`.
#[test]
fn the_checked_in_packaging_files_are_the_generators_output() {
    let v = ServiceValues::packaged();
    let cases = [
        (
            "packaging/systemd/wardend.service",
            include_str!("../../../packaging/systemd/wardend.service"),
            systemd::service(&v).unwrap(),
        ),
        (
            "packaging/systemd/wardend.socket",
            include_str!("../../../packaging/systemd/wardend.socket"),
            systemd::socket(&v).unwrap(),
        ),
        (
            "packaging/launchd/dev.warden.wardend.plist",
            include_str!("../../../packaging/launchd/dev.warden.wardend.plist"),
            launchd::plist(&v).unwrap(),
        ),
        (
            "packaging/apparmor/wardend",
            include_str!("../../../packaging/apparmor/wardend"),
            apparmor::profile(&v).unwrap(),
        ),
    ];
    for (name, checked_in, generated) in cases {
        assert_eq!(
            checked_in, generated,
            "{name} differs from the generator's output for ServiceValues::packaged()"
        );
    }
}

fn packaged_files() -> Vec<(&'static str, String)> {
    let v = ServiceValues::packaged();
    vec![
        ("systemd/wardend.service", systemd::service(&v).unwrap()),
        ("systemd/wardend.socket", systemd::socket(&v).unwrap()),
        (
            "launchd/dev.warden.wardend.plist",
            launchd::plist(&v).unwrap(),
        ),
        ("apparmor/wardend", apparmor::profile(&v).unwrap()),
    ]
}

/// Writes `packaging/` from the generators (run by hand, see above).
#[test]
#[ignore = "rewrites packaging/ in the source tree; run by hand after changing a generator"]
fn regenerate_packaging() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging");
    for (name, content) in packaged_files() {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
    }
}

fn places() -> Places {
    Places {
        unit_dir: "/h/.config/systemd/user".into(),
        agents_dir: "/h/Library/LaunchAgents".into(),
        policies: "/h/.config/warden/policies".into(),
        state: "/h/.local/state/warden".into(),
    }
}

fn facts(manager: bool, loaded: bool, answering: bool) -> Facts {
    Facts {
        manager: if manager {
            Ok(())
        } else {
            Err("systemctl --user: Failed to connect to bus: No medium found".into())
        },
        loaded,
        answering: answering.then(|| "/run/user/1000/warden/wardend.sock".into()),
        uid: 1000,
    }
}

fn argv(plan: &Plan) -> Vec<String> {
    plan.steps
        .iter()
        .map(|s| match s {
            Step::Write { path, .. } => format!("write {}", path.display()),
            Step::Remove { path } => format!("remove {}", path.display()),
            Step::Run { argv } => argv.join(" "),
        })
        .collect()
}

fn none(_: &Path) -> Option<String> {
    None
}

#[test]
fn install_with_a_user_manager_enables_and_starts_the_socket() {
    let v = ServiceValues::packaged();
    let plan = plan_install(
        Platform::Linux,
        &v,
        &places(),
        &facts(true, false, false),
        none,
    )
    .unwrap();
    assert_eq!(
        argv(&plan),
        [
            "write /h/.config/systemd/user/wardend.service",
            "write /h/.config/systemd/user/wardend.socket",
            "systemctl --user daemon-reload",
            "systemctl --user enable wardend.socket",
            "systemctl --user start wardend.socket",
        ]
    );
    // An autostarted daemon on the socket is not taken over under it.
    let plan = plan_install(
        Platform::Linux,
        &v,
        &places(),
        &facts(true, false, true),
        none,
    )
    .unwrap();
    assert_eq!(
        argv(&plan).last().unwrap(),
        "systemctl --user enable wardend.socket"
    );
    assert!(plan.notes[0].starts_with(
        "a wardend not started by systemd answers on /run/user/1000/warden/wardend.sock"
    ));
}

#[test]
fn install_without_a_user_manager_writes_the_units_and_says_so() {
    let plan = plan_install(
        Platform::Linux,
        &ServiceValues::packaged(),
        &places(),
        &facts(false, false, false),
        none,
    )
    .unwrap();
    assert_eq!(plan.steps.len(), 2);
    assert!(plan.notes[0].starts_with(
        "no user service manager answers (systemctl --user: Failed to connect to bus: No medium \
         found): the units are written, not enabled or started"
    ));
    assert!(plan.notes[1].contains("warden-shim starts it itself"));
}

#[test]
fn install_never_overwrites_a_file_it_did_not_write() {
    let foreign = |p: &Path| {
        p.ends_with("wardend.service")
            .then(|| "[Service]\nExecStart=/mine\n".to_owned())
    };
    let err = plan_install(
        Platform::Linux,
        &ServiceValues::packaged(),
        &places(),
        &facts(true, false, false),
        foreign,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "/h/.config/systemd/user/wardend.service exists and was not written by wardenctl \
         install; move it away (or merge it by hand) and run install again"
    );
    // Its own earlier output is replaced.
    let own = |_: &Path| Some(format!("# {MARKER}: old\n"));
    assert!(plan_install(
        Platform::Linux,
        &ServiceValues::packaged(),
        &places(),
        &facts(true, true, true),
        own
    )
    .is_ok());
}

#[test]
fn uninstall_reverses_install_and_only_for_its_own_files() {
    let own = |p: &Path| {
        (p.ends_with("wardend.service") || p.ends_with("wardend.socket"))
            .then(|| format!("# {MARKER}\n"))
    };
    let plan = plan_uninstall(
        Platform::Linux,
        LABEL,
        &places(),
        &facts(true, true, true),
        own,
    );
    assert_eq!(
        argv(&plan),
        [
            "systemctl --user disable --now wardend.socket wardend.service",
            "remove /h/.config/systemd/user/wardend.socket",
            "remove /h/.config/systemd/user/wardend.service",
            "systemctl --user daemon-reload",
        ]
    );
    assert_eq!(
        plan.notes,
        [
            "kept: your policies (/h/.config/warden/policies) and the audit store \
          (/h/.local/state/warden)"
        ]
    );
    // A unit the user wrote is left alone, and not disabled.
    let mixed = |p: &Path| {
        Some(if p.ends_with("wardend.socket") {
            format!("# {MARKER}\n")
        } else {
            "[Service]\n".to_owned()
        })
    };
    let plan = plan_uninstall(
        Platform::Linux,
        LABEL,
        &places(),
        &facts(true, true, true),
        mixed,
    );
    assert_eq!(
        argv(&plan),
        [
            "systemctl --user disable --now wardend.socket",
            "remove /h/.config/systemd/user/wardend.socket",
            "systemctl --user daemon-reload",
        ]
    );
    assert_eq!(
        plan.notes[0],
        "left /h/.config/systemd/user/wardend.service: not written by wardenctl install"
    );
    let plan = plan_uninstall(
        Platform::Linux,
        LABEL,
        &places(),
        &facts(false, false, false),
        none,
    );
    assert!(plan.steps.is_empty());
    assert_eq!(
        plan.notes[0],
        "nothing to remove: no systemd user units written by wardenctl install"
    );
}

#[test]
fn launchd_install_bootstraps_and_uninstall_boots_out() {
    let v = ServiceValues::packaged();
    let plan = plan_install(
        Platform::Macos,
        &v,
        &places(),
        &facts(true, false, false),
        none,
    )
    .unwrap();
    assert_eq!(
        argv(&plan),
        [
            "write /h/Library/LaunchAgents/dev.warden.wardend.plist",
            "launchctl bootstrap gui/1000 /h/Library/LaunchAgents/dev.warden.wardend.plist",
        ]
    );
    let plan = plan_install(
        Platform::Macos,
        &v,
        &places(),
        &facts(true, true, false),
        none,
    )
    .unwrap();
    assert_eq!(
        argv(&plan)[1],
        "launchctl bootout gui/1000/dev.warden.wardend"
    );
    let own = |_: &Path| Some(format!("<!-- {MARKER} -->"));
    let plan = plan_uninstall(
        Platform::Macos,
        LABEL,
        &places(),
        &facts(true, true, false),
        own,
    );
    assert_eq!(
        argv(&plan),
        [
            "launchctl bootout gui/1000/dev.warden.wardend",
            "remove /h/Library/LaunchAgents/dev.warden.wardend.plist",
        ]
    );
}

#[test]
fn values_must_be_absolute_utf8_single_lines() {
    let bad = |p: &str| ServiceValues {
        wardend: PathBuf::from(p),
        ..ServiceValues::packaged()
    };
    assert_eq!(
        systemd::service(&bad("wardend")).unwrap_err().to_string(),
        "wardend is not absolute"
    );
    assert!(matches!(
        launchd::plist(&bad("/a\nb")),
        Err(ValueError::Control { .. })
    ));
}
