"""The token formats a secret is found by (each type's pattern and gate) and the placeholder it becomes."""

from __future__ import annotations

import re

_PLACEHOLDER_START = "[REDACTED:"
_NOT_PLACEHOLDER = r"(?!\[REDACTED:)"
# A command-line argument that may be a secret: not an option, a variable, a substitution or a template, a
# ``name=value`` spec (``docker build --secret id=x,src=f``), a help text's metavar (``--token TOKEN``) nor prose
# (``the --token flag``); and the arguments between a command and its ``-p``.
_CLI_STOPS = r"\s\"'`;|&<>"
_CLI_VALUE = (
    rf"(?![-$%{{<(`]){_NOT_PLACEHOLDER}(?![A-Za-z_]\w*=[^=])(?![A-Z][A-Z_]*+(?![^{_CLI_STOPS}]))"
    r"(?!(?i:flags?|options?|arguments?|parameters?|values?|switch(?:es)?)\b)"
    rf"[^{_CLI_STOPS}]{{3,256}}"
)
_CLI_ARGUMENTS = r"\b(?:[^\s;|&]|[ \t](?!-p)){0,300}+[ \t]"

# (placeholder type, pattern, flags). A pattern with a ``secret`` group has only that group replaced, so the
# context around it (a header name, a URL's scheme and host) survives; otherwise the whole match is replaced.
# Order matters: specific token formats run before the generic header, URL and assignment rules.
_RULES: tuple[tuple[str, str, int], ...] = (
    (
        "private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,.\\]|-(?!----)|[\"'`][\s+,]{0,80}+[\"'`])*"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
        0,
    ),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", 0),
    ("anthropic_api_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", 0),
    (
        "openai_api_key",
        r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?(?=[A-Za-z_-]{0,255}+[0-9])[A-Za-z0-9_-]{20,}",
        0,
    ),
    ("github_token", r"\bgh[pousr]_[A-Za-z0-9]{30,}", 0),
    ("github_fine_grained_token", r"\bgithub_pat_[A-Za-z0-9_]{30,}", 0),
    ("gitlab_token", r"\bgl(?:pat|dt|rt|ptt|soat)-[A-Za-z0-9_-]{20,}", 0),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9_/-]{8,})",
        re.IGNORECASE,
    ),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", 0),
    ("stripe_key", r"\b(?:[sr]k_(?:live|test)|whsec)_[A-Za-z0-9]{16,}", 0),
    ("google_api_key", r"\bAIza[A-Za-z0-9_-]{35}", 0),
    ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}\b", 0),
    (
        "aws_secret_key",
        r"\b(?:aws[_-]?)?secret[_-]?access[_-]?key\\?[\"']?[ \t]*(?::=|=>|[:=])[ \t]*\\?[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        re.IGNORECASE,
    ),
    (
        "azure_storage_key",
        r"\b(?:Account|SharedAccess)Key[ \t]*=[ \t]*(?P<secret>[A-Za-z0-9+/]{16,}={0,2})",
        re.IGNORECASE,
    ),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36,}", 0),
    # Formats after gitleaks' rule list (https://github.com/gitleaks/gitleaks, config/gitleaks.toml, MIT License,
    # Copyright (c) 2019 Zachary Rice): each a fixed prefix, so a scan costs little.
    ("age_secret_key", r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b", 0),
    ("twilio_api_key", r"\bSK[0-9a-fA-F]{32}\b", 0),
    ("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b", 0),
    ("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", 0),
    ("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?\b", 0),
    ("linear_api_key", r"\blin_api_[A-Za-z0-9]{40}\b", 0),
    ("postman_api_key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b", 0),
    ("grafana_token", r"\b(?:glc_[A-Za-z0-9+/]{32,400}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})", 0),
    ("doppler_token", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}\b", 0),
    ("pulumi_token", r"\bpul-[a-f0-9]{40}\b", 0),
    ("atlassian_token", r"\bATATT3[A-Za-z0-9_=-]{180,200}", 0),
    ("mailgun_key", r"\bkey-[a-f0-9]{32}\b", 0),
    (  # a GCP service account file names its key: the key's id is enough to ask for it
        "gcp_private_key_id",
        r"\bprivate_key_id\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?(?P<secret>[0-9a-f]{40})\b",
        0,
    ),
    (  # crypt(3) and htpasswd hashes (bcrypt, apr1-MD5, SHA-crypt, yescrypt; {SHA} after a user name): each can
        # be cracked offline, so the hash is a credential
        "password_hash",
        r"(?<![\w$])\$(?:2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}|apr1\$[./A-Za-z0-9]{1,8}\$[./A-Za-z0-9]{22}"
        r"|[156]\$(?:rounds=\d{1,9}\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{22,86}"
        r"|y\$[./A-Za-z0-9]{1,32}\$[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{43})"
        r"|(?<=:)\{S?SHA\}[A-Za-z0-9+/]{27,}={0,2}",
        0,
    ),
    (  # ~/.pgpass: hostname:port:database:username:password, a whole line
        "pgpass_password",
        r"(?m)^[ \t]{0,8}(?:[A-Za-z0-9*][A-Za-z0-9.*-]{0,252}|\[[0-9A-Fa-f:]{2,39}\]):(?:\d{1,5}|\*)"
        rf":[^\s:]{{1,63}}:[^\s:]{{1,63}}:(?P<secret>{_NOT_PLACEHOLDER}[^\s:]{{1,256}})[ \t]*\r?$",
        0,
    ),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}", 0),
    ("sendgrid_api_key", r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", 0),
    ("pypi_token", r"\bpypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,}", 0),
    (
        "url_credentials",
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/?#@\[\]\"'<>]{0,256}:"
        rf"(?P<secret>{_NOT_PLACEHOLDER}[^\s/?#\"'<>]{{1,256}})@(?=[A-Za-z0-9\[])",
        0,
    ),
    (
        "bearer_token",
        rf"\bbearer[ \t]+(?P<secret>{_NOT_PLACEHOLDER}(?=[A-Za-z._~+/-]{{0,255}}+[0-9])[A-Za-z0-9._~+/-]{{16,}}=*)",
        re.IGNORECASE,
    ),
    (
        "bearer_token",
        r"\bauthorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?(?:token[ \t]+)?(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)",
        re.IGNORECASE,
    ),
    (
        "basic_auth",
        r"\bauthorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?basic[ \t]+(?P<secret>[A-Za-z0-9+/]{6,}={0,2})",
        re.IGNORECASE,
    ),
    (
        "basic_auth",
        r"curl\b(?:(?![ \t](?:-u|--user)[ \t=])[^\n;|&]){0,300}[ \t](?:-u|--user)(?:[ \t]+|=)[\"']?[^\s:\"']{1,128}:"
        rf"(?P<secret>{_NOT_PLACEHOLDER}[^\s\"']{{1,256}})",
        0,
    ),
    (  # ~/.netrc and _netrc: "machine HOST login USER password SECRET", on one line or several
        "netrc_password",
        r"\b(?:machine[ \t]+(?:[^\s.]{1,63}\.[^\s]{1,200}|[^\s]{1,253}(?=\s+login\b))|default(?=\s+login\b))"
        r"(?:\s+(?:login|account|port)[ \t]+[^\s]{1,256}){0,3}"
        rf"\s+password[ \t]+(?P<secret>{_NOT_PLACEHOLDER}[^\s]{{1,256}})",
        0,
    ),
    (  # ~/.docker/config.json: "auth" is base64 of user:password
        "docker_auth",
        r"\\?\"auth\\?\"[ \t]*:[ \t]*\\?\"(?P<secret>[A-Za-z0-9+/]{12,}={0,2})\\?\"",
        0,
    ),
    (  # Maven settings.xml and other XML: <password>SECRET</password>, never a ${property} reference; a
        # pretty-printed element keeps its indentation
        "xml_secret",
        r"<(?P<tag>[\w.-]{0,40}(?:password|passphrase|passwd|secret|token|api[_-]?key))>\s{0,80}"
        rf"(?P<secret>{_NOT_PLACEHOLDER}(?!\$\{{)[^<\s](?:[^<]{{0,510}}[^<\s])?)\s{{0,80}}</(?P=tag)>",
        re.IGNORECASE,
    ),
    (  # an HTTP Cookie / Set-Cookie header: the whole value (session ids are bearer credentials), also as a
        # quoted key and value in code or JSON ({"Cookie": "sid=..."})
        "cookie",
        r"\b(?:set-)?cookie\\?[\"']?[ \t]*:[ \t]*\\?[\"']?"
        rf"(?P<secret>{_NOT_PLACEHOLDER}(?=[^\r\n\"'`=]{{1,128}}=)[^\r\n\"'`]{{1,4096}})",
        re.IGNORECASE,
    ),
    (
        "cli_secret",
        r"(?<![\w-])--?(?:(?:[A-Za-z0-9]{1,20}[_-]){0,4}"
        r"(?i:pass(?:word|wd|phrase)?|token|secret|(?:api|access|private|auth|secret|client)[_-]?key)"
        r"|(?:src|dest)?(?:store|key)pass)"
        rf"[ \t]+[\"']?(?P<secret>{_CLI_VALUE})",
        0,
    ),
    (
        "cli_secret",
        rf"\b(?:mysql|mysqldump|mysqladmin|mariadb(?:-dump|-admin)?){_CLI_ARGUMENTS}-p[\"']?(?P<secret>{_CLI_VALUE})",
        0,
    ),
    (  # echo SECRET | docker login --password-stdin (a variable or a file is no secret of its own)
        "cli_secret",
        r"\b(?:echo|printf)(?:[ \t]+-[neE]{1,3})?[ \t]+[\"']?"
        rf"(?P<secret>{_NOT_PLACEHOLDER}(?![$%`(<])[^\s\"'`|;&]{{1,256}})[\"']?[ \t]*\|[ \t]*(?:sudo[ \t]+)?"
        r"(?:docker|podman|buildah|skopeo|nerdctl|oras|crane|helm)\b[^\n|;&]{0,300}--password-stdin",
        0,
    ),
    (
        "cli_secret",
        rf"\b(?:sshpass|(?:docker|podman|buildah|skopeo|helm[ \t]+registry)[ \t]+login){_CLI_ARGUMENTS}-p"
        rf"(?:[ \t]+|=)?[\"']?(?P<secret>{_CLI_VALUE})",
        0,
    ),
)

_ASSIGNMENT_NAME = "secret_assignment"

_AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "APKA", "AROA", "ASCA")
# A rule runs only on text holding one of its gate's strings (a substring test costs far less than a regex scan
# over text that cannot match; most text holds no token prefix at all).
_GATE_MIN = 400
_GATES: dict[str, tuple[str, ...]] = {
    "private_key": ("PRIVATE KEY",),
    "jwt": ("eyJ",),
    "anthropic_api_key": ("sk-ant-",),
    "openai_api_key": ("sk-",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "github_fine_grained_token": ("github_pat_",),
    "gitlab_token": ("glpat-", "gldt-", "glrt-", "glptt-", "glsoat-"),
    "slack_token": ("xox",),
    "stripe_key": ("k_live_", "k_test_", "whsec_"),
    "google_api_key": ("AIza",),
    "aws_access_key": _AWS_PREFIXES,
    "npm_token": ("npm_",),
    "age_secret_key": ("AGE-SECRET-KEY-1",),
    "twilio_api_key": ("SK",),
    "digitalocean_token": ("_v1_",),
    "shopify_token": ("shpat_", "shpca_", "shppa_", "shpss_"),
    "databricks_token": ("dapi",),
    "linear_api_key": ("lin_api_",),
    "postman_api_key": ("PMAK-",),
    "grafana_token": ("glc_", "glsa_"),
    "doppler_token": ("dp.",),
    "pulumi_token": ("pul-",),
    "atlassian_token": ("ATATT3",),
    "mailgun_key": ("key-",),
    "gcp_private_key_id": ("private_key_id",),
    "password_hash": ("$", "{S"),
    "huggingface_token": ("hf_",),
    "sendgrid_api_key": ("SG.",),
    "pypi_token": ("pypi-AgE",),
    "docker_auth": ("auth",),
    "xml_secret": ("<",),
    "netrc_password": ("password",),
}

PATTERN_NAMES: tuple[str, ...] = (*dict.fromkeys(name for name, _, _ in _RULES), _ASSIGNMENT_NAME, "prose_secret")


def placeholder(name: str) -> str:
    """The text a secret of type ``name`` is replaced with."""
    return f"{_PLACEHOLDER_START}{name}]"
