"""Fake secrets of every kind the privacy rules know, each assembled from pieces so that no file holds a string
shaped like a real credential: shared by the privacy tests of the rules and of the hooks."""

from __future__ import annotations


def mixed(length: int) -> str:
    """A token-like run of letters and digits of the given length."""
    return ("a1B2c3D4e5F6g7H8i9J0kLmN" * 20)[:length]


PEM_BODY = "MIIEow" + mixed(58) + "\n" + mixed(64) + "\n" + mixed(20) + "=="
PEM = "-----BEGIN " + "RSA PRIVATE KEY-----\n" + PEM_BODY + "\n-----END " + "RSA PRIVATE KEY-----"
JWT = "eyJ" + "hbGciOiJIUzI1NiJ9" + "." + "eyJ" + "zdWIiOiIxMjM0NTY3ODkwIn0" + "." + "dozjgNryP4J3jVmN" + mixed(27)
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCY" + "EXAMPLEKEY"
AZURE_KEY = mixed(86) + "=="

# (placeholder type, text holding a fake secret, the part that must disappear)
EXAMPLES: list[tuple[str, str, str]] = [
    ("private_key", "key:\n" + PEM + "\ndone", PEM_BODY),
    ("private_key", "-----BEGIN " + "OPENSSH PRIVATE KEY-----\n" + mixed(70) + "\n", mixed(70)),
    ("private_key", '{"key": "-----BEGIN ' + "PRIVATE KEY-----\\n" + mixed(64) + '\\n-----END PRIVATE KEY-----\\n"}',
     mixed(64)),
    ("jwt", "token " + JWT + " expires", JWT),
    ("anthropic_api_key", "ANTHROPIC=" + "sk-ant-" + "api03-" + mixed(40), "api03-" + mixed(40)),
    ("anthropic_api_key", "use sk-ant-" + "admin01-" + mixed(30) + " here", "admin01-" + mixed(30)),
    ("openai_api_key", "key is " + "sk-" + "proj-" + mixed(48), "proj-" + mixed(48)),
    ("openai_api_key", "openai.api_key = sk-" + mixed(48), mixed(48)),
    ("github_token", "git push https://" + "ghp_" + mixed(36) + "@github.com/o/r", "ghp_" + mixed(36)),
    ("github_token", "GH_TOKEN=" + "ghs_" + mixed(36), "ghs_" + mixed(36)),
    ("github_token", "oauth " + "gho_" + mixed(36) + " user " + "ghu_" + mixed(36) + " ref " + "ghr_" + mixed(36),
     mixed(36)),
    ("github_fine_grained_token", "github_pat_" + "11ABCDEFG0" + "_" + mixed(59), mixed(59)),
    ("gitlab_token", "glpat-" + mixed(20), mixed(20)),
    ("slack_webhook", "POST https://hooks.slack.com/services/" + "T0000AB12/B0000CD34/" + mixed(24),
     "T0000AB12/B0000CD34/" + mixed(24)),
    ("slack_token", "SLACK=" + "xoxb-" + "123456789012-1234567890123-" + mixed(24), mixed(24)),
    ("slack_token", "xoxp-" + "123456789012-" + mixed(30), mixed(30)),
    ("stripe_key", "stripe.api_key = 'sk_" + "live_" + mixed(24) + "'", mixed(24)),
    ("stripe_key", "rk_" + "live_" + mixed(24) + " and sk_" + "test_" + mixed(26), mixed(24)),
    ("stripe_key", "STRIPE_WEBHOOK=" + "whsec_" + mixed(32), mixed(32)),
    ("google_api_key", "https://maps.googleapis.com/api?key=" + "AIza" + "Sy" + mixed(33) + "&q=x", "Sy" + mixed(33)),
    ("aws_access_key", "aws_access_key_id = " + "AKIA" + "IOSFODNN7EXAMPLE", "AKIA" + "IOSFODNN7EXAMPLE"),
    ("aws_access_key", "creds ASIA" + "ZXCVBNMASDFGHJKL" + " rotated", "ASIA" + "ZXCVBNMASDFGHJKL"),
    ("aws_secret_key", "[default]\naws_secret_access_key = " + AWS_SECRET + "\n", AWS_SECRET),
    ("aws_secret_key", '{"SecretAccessKey": "' + AWS_SECRET + '", "SessionToken": null}', AWS_SECRET),
    ("azure_storage_key",
     "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + AZURE_KEY + ";EndpointSuffix=core.windows.net",
     AZURE_KEY),
    ("npm_token", "//registry.npmjs.org/:_authToken=" + "npm_" + mixed(36), mixed(36)),
    ("huggingface_token", "login --token " + "hf_" + mixed(34), mixed(34)),
    ("sendgrid_api_key", "SG." + mixed(22) + "." + mixed(43), mixed(43)),
    ("pypi_token", "password = " + "pypi-" + "AgEIcHlwaS5vcmc" + mixed(70), mixed(70)),
    ("url_credentials", "DATABASE_URL=postgres://admin:" + "S3cr3tPa55" + "@db.internal:5432/app", "S3cr3tPa55"),
    ("url_credentials", "redis://:" + "hunter22" + "@cache:6379/0", "hunter22"),
    ("bearer_token", "curl -H 'Authorization: Bearer " + mixed(32) + "' https://api", mixed(32)),
    ("bearer_token", "Authorization: token " + mixed(40), mixed(40)),
    ("basic_auth", "Authorization: Basic " + "YWRtaW46aHVudGVyMg" + "==", "YWRtaW46aHVudGVyMg"),
    ("basic_auth", "curl -s -u admin:" + "hunter2" + " https://example.com", "hunter2"),
    ("cli_secret", "docker login -u me --password " + "Hunter2pw" + " ghcr.io", "Hunter2pw"),
    ("secret_assignment", 'password = "' + "correct-horse" + '"', "correct-horse"),
    ("secret_assignment", '{"api_key": "' + "abc123def" + '"}', "abc123def"),
    ("secret_assignment", "SECRET_TOKEN: " + "s3cr3t-" + "value", "s3cr3t-value"),
    ("secret_assignment", "export DB_PASSWORD=" + "changeme", "changeme"),
    ("secret_assignment", "db:\n  password: " + "supersecretpw" + "\n", "supersecretpw"),
    ("secret_assignment", "password: str = '" + "s3cret" + "'", "s3cret"),
    ("secret_assignment", "X-Api-Key: " + "abcd" + "1234efgh", "abcd1234efgh"),
    ("secret_assignment", "const clientSecret = `" + "abc" + "xyz`;", "abcxyz"),
    ("secret_assignment", "mysql --password=" + "hunter2" + "hunter2 db", "hunter2hunter2"),
    ("secret_assignment", 'cmd = "mysql --password=' + "hunter2" + 'hunter2 db"', "hunter2hunter2"),
    ("secret_assignment", "helm install --set=secret=" + "abc" + "123456", "abc123456"),
    ("secret_assignment", "token: Optional[Dict[str, Any]] = '" + "abc" + "'", "abc"),
    ("secret_assignment", "X-Api-Key: " + "abcd" + "1234efgh, password = '" + "xyz" + "'", "abcd1234efgh"),
    ("secret_assignment", "$password = '" + "pa55" + "';", "pa55"),
    ("secret_assignment", "if password == '" + "letmein1" + "':", "letmein1"),
    ("secret_assignment", "GET /cb?access_token=" + "q1w2e3r4t5" + "&state=x", "q1w2e3r4t5"),
    ("netrc_password", "machine api.example.com login alice password " + "Sup3r" + "Pw9", "Sup3rPw9"),
    ("netrc_password", "machine build-host\n  login ci\n  password " + "t0k" + "en77", "t0ken77"),
    ("netrc_password", "default login anonymous password " + "guest" + "123", "guest123"),
    ("docker_auth", '{"auths": {"registry.example.com": {"auth": "' + "YWxpY2U6" + "U3VwM3JQdzk=" + '"}}}',
     "YWxpY2U6U3VwM3JQdzk="),
    ("xml_secret", "<server><id>central</id><password>" + "Sup3r" + "Pw9</password></server>", "Sup3rPw9"),
    ("xml_secret", "<keyStorePassword>" + "chang" + "eit2</keyStorePassword>", "changeit2"),
    ("cookie", "Cookie: sessionid=" + mixed(24) + "; csrftoken=" + mixed(16), mixed(24)),
    ("cookie", "curl -H 'Set-Cookie: session=" + mixed(30) + "; Path=/; HttpOnly' https://x", mixed(30)),
    ("cookie", 'headers = {"Cookie": "sessionid=' + mixed(24) + '"}', mixed(24)),
    ("cookie", "requests.get(url, headers={'cookie': 'sid=" + mixed(20) + "; theme=dark'})", mixed(20)),
    ("xml_secret", "<server>\n  <password>\n    " + "Sup3r" + "Pw9\n  </password>\n</server>", "Sup3rPw9"),
]
