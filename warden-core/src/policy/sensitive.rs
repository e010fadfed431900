//! Paths that hold secrets or identities: a grant of one is never made
//! without a warning naming it (`wardenctl suggest`, and the starter policies
//! of `wardenctl init`). Matched by where they are (under `$HOME` mostly) and
//! by name (`.env` files anywhere).

use std::path::Path;

/// Under `$HOME`: the relative path and what it holds.
const UNDER_HOME: &[(&str, &str)] = &[
    (".ssh", "SSH keys and known hosts"),
    (".gnupg", "GnuPG keys"),
    (".aws", "AWS credentials"),
    (".azure", "Azure credentials"),
    (".config/gcloud", "Google Cloud credentials"),
    (".kube", "Kubernetes credentials"),
    (".docker", "Docker credentials"),
    (".netrc", "passwords for hosts (netrc)"),
    (".git-credentials", "git credentials"),
    (".config/gh", "GitHub CLI tokens"),
    (".npmrc", "npm tokens"),
    (".pypirc", "PyPI tokens"),
    (".cargo/credentials", "crates.io tokens"),
    (".cargo/credentials.toml", "crates.io tokens"),
    (".password-store", "pass passwords"),
    (".local/share/keyrings", "the desktop keyring"),
    (".mozilla", "a Firefox profile (cookies, saved passwords)"),
    (".thunderbird", "a Thunderbird profile (mail, passwords)"),
    (
        ".config/google-chrome",
        "a Chrome profile (cookies, saved passwords)",
    ),
    (
        ".config/chromium",
        "a Chromium profile (cookies, saved passwords)",
    ),
    (
        ".config/BraveSoftware",
        "a Brave profile (cookies, saved passwords)",
    ),
    (
        ".config/microsoft-edge",
        "an Edge profile (cookies, saved passwords)",
    ),
    (".bash_history", "shell history"),
    (".zsh_history", "shell history"),
];

/// Anywhere: what it holds, when `path` is or lies under a sensitive path
/// (`home`: the user's home directory, for the relative entries).
pub fn sensitive(path: &Path, home: Option<&Path>) -> Option<&'static str> {
    if let Some(rel) = home.and_then(|h| path.strip_prefix(h).ok()) {
        for (p, what) in UNDER_HOME {
            if rel.starts_with(p) {
                return Some(what);
            }
        }
    }
    // `.env`, `.env.local`, `prod.env`...: environment files with secrets.
    path.iter()
        .find_map(|c| {
            let c = c.to_string_lossy();
            (c == ".env" || c.starts_with(".env.") || c.ends_with(".env"))
                .then_some("an environment file (often API keys)")
        })
        .or_else(|| {
            let name = path.file_name()?.to_string_lossy().to_string();
            let key = name.starts_with("id_") && !name.ends_with(".pub")
                || name.ends_with(".pem")
                || name.ends_with(".key");
            key.then_some("a private key")
        })
}

#[cfg(test)]
mod tests {
    use super::sensitive;
    use std::path::Path;

    #[test]
    fn secrets_are_named_and_the_rest_is_not() {
        let home = Some(Path::new("/home/ana"));
        let s = |p: &str| sensitive(Path::new(p), home);
        assert_eq!(
            s("/home/ana/.ssh/id_ed25519"),
            Some("SSH keys and known hosts")
        );
        assert_eq!(s("/home/ana/.ssh"), Some("SSH keys and known hosts"));
        assert_eq!(s("/home/ana/.aws/credentials"), Some("AWS credentials"));
        assert!(s("/home/ana/.local/share/keyrings/login.keyring").is_some());
        assert!(s("/home/ana/.mozilla/firefox/x.default/logins.json").is_some());
        assert!(s("/srv/app/.env").is_some());
        assert!(s("/srv/app/.env.production").is_some());
        assert!(s("/srv/app/deploy/id_rsa").is_some());
        assert!(s("/srv/tls/server.key").is_some());
        assert_eq!(s("/home/ana/.sshfoo"), None);
        assert_eq!(s("/home/ana/src/project/README.md"), None);
        assert_eq!(s("/srv/app/id_rsa.pub"), None);
        assert_eq!(s("/home/ana/environment.txt"), None);
        // Without a home, only the names anywhere count.
        assert_eq!(sensitive(Path::new("/home/ana/.ssh/config"), None), None);
    }
}
