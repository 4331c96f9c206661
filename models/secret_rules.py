"""The secret shapes `models.redact` removes, each with where its shape is defined.

Two kinds of rule:

- **Token shapes** (`TOKEN_RULES`): a credential recognisable by itself, whatever stands around it
  (a provider's key prefix and alphabet, a JWT, a Slack webhook's path). The whole token is replaced.
- **Secret keys** (`SECRET_KEY_WORDS`, `SECRET_KEY_NAMES`): the name in front of a value
  (`password=`, `--token`, `AccountKey=`, `sig=`) says the value is secret, whatever it looks like.
  The key is kept and the value replaced, so a reader sees what was removed.

The shapes follow the rules of the secret scanners gitleaks (`config/gitleaks.toml`, rule ids given
below) and Yelp's detect-secrets (plugin names given below), and the providers' own documentation of
their token formats. They are restated here rather than imported: the scanners' own patterns are
written for Go's linear-time engine or for whole-file scans, while these run on Python's
backtracking `re` and must stay linear (`models.redact` explains how), and `models` depends on
nothing but the standard library and pydantic.

Every token pattern starts with a literal, so the regex engine skips to the places where one could
start at the speed of a character search (`models.redact` checks that a word starts there), and every
quantifier is bounded or possessive (`{n,}+`): a pattern costs a bounded number of steps at each
place where it is tried, and what it consumes it never gives back. `AccountKey=` (detect-secrets
AzureStorageKeyDetector) is a secret key, not a token shape: its value ends at the next `;`. A pattern
with an unbounded run that something must follow (a JWT's first two parts) checks in itself that a
word starts there (`e(?<![...]e)yJ`), so that it is tried once per word, not at every `eyJ` of a run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenRule:
    name: str
    pattern: str
    source: str


TOKEN_RULES: tuple[TokenRule, ...] = (
    TokenRule("aws-access-key-id", r"A(?:3T[A-Z0-9]|KIA|SIA|BIA|CCA)[A-Z0-9]{16}(?![A-Za-z0-9])",
              "gitleaks aws-access-token; detect-secrets AWSKeyDetector (ASIA: temporary STS credentials)"),
    TokenRule("github-token", r"gh[pousr]_[A-Za-z0-9]{30,}+",
              "gitleaks github-pat, github-oauth, github-app-token, github-refresh-token"),
    TokenRule("github-fine-grained-pat", r"github_pat_[A-Za-z0-9_]{22,}+",
              "gitleaks github-fine-grained-pat (github_pat_ and 82 characters)"),
    TokenRule("gitlab-token", r"gl(?:pat|dt|ptt|rt|soat|cbt|imt|agent|oas|ft)-[A-Za-z0-9_-]{20,}+",
              "gitleaks gitlab-pat, gitlab-deploy-token, gitlab-ptt, gitlab-rrt and the other gitlab-* rules"),
    TokenRule("slack-token", r"xox[abcdeoprs]-[A-Za-z0-9-]{10,}+",
              "gitleaks slack-bot-token, slack-user-token, slack-legacy-*; detect-secrets SlackDetector"),
    TokenRule("slack-app-token", r"xapp-[0-9]-[A-Za-z0-9-]{10,}+", "gitleaks slack-app-token (xapp-1-A...-...)"),
    TokenRule("slack-webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{20,}+",
              "gitleaks slack-webhook-url; detect-secrets SlackDetector"),
    TokenRule("stripe-key", r"[prs]k_(?:live|test|prod)_[A-Za-z0-9]{10,}+",
              "gitleaks stripe-access-token; detect-secrets StripeDetector"),
    TokenRule("google-api-key", r"AIza[A-Za-z0-9_-]{35}", "gitleaks gcp-api-key"),
    TokenRule("google-oauth-token", r"ya29\.[A-Za-z0-9_-]{20,}+", "Google OAuth 2.0 access tokens (ya29.)"),
    TokenRule("npm-token", r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])",
              "gitleaks npm-access-token; detect-secrets NpmDetector"),
    TokenRule("pypi-token", r"pypi-AgE[A-Za-z0-9_-]{40,}+",
              "gitleaks pypi-upload-token; detect-secrets PypiTokenDetector"),
    TokenRule("docker-hub-token", r"dckr_pat_[A-Za-z0-9_-]{20,}+", "Docker Hub personal access tokens (dckr_pat_)"),
    TokenRule("huggingface-token", r"hf_[A-Za-z0-9]{30,}+", "gitleaks huggingface-access-token"),
    TokenRule("openai-anthropic-key", r"sk-[A-Za-z0-9_-]{20,}+", "gitleaks openai-api-key, anthropic-api-key"),
    TokenRule("sendgrid-key", r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}", "gitleaks sendgrid-api-token; "
              "detect-secrets SendGridDetector"),
    TokenRule("twilio-key", r"SK[0-9a-fA-F]{32}(?![0-9a-fA-F])",
              "gitleaks twilio-api-key; detect-secrets TwilioKeyDetector"),
    TokenRule("digitalocean-token", r"do[opr]_v1_[a-f0-9]{64}",
              "gitleaks digitalocean-pat, -access-token, -refresh-token"),
    TokenRule("shopify-token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "gitleaks shopify-*"),
    TokenRule("jwt", r"e(?<![A-Za-z0-9_-]e)yJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+",
              "gitleaks jwt; detect-secrets JwtTokenDetector"),
)

# A key that contains one of these words names a secret (`DB_PASSWORD`, `x-auth-token`, `client_secret`);
# source: detect-secrets KeywordDetector's denylist and gitleaks generic-api-key's keywords.
SECRET_KEY_WORDS: tuple[str, ...] = (
    "token", "passwd", "password", "passwort", "pwd", "secret", "api_key", "api-key", "apikey", "access_key",
    "access-key", "accesskey", "private_key", "private-key", "privatekey", "credential", "auth", "session_id",
    "session-id", "sessionid", "cookie", "account_key", "accountkey", "shared_access_key", "sharedaccesskey",
)
# Keys that name a secret only as a whole word (`sig=` of an Azure SAS URL, `X-Amz-Signature=` of an AWS
# presigned URL), never as part of another word (`design=`, `signal=`).
SECRET_KEY_NAMES: tuple[str, ...] = (
    "sig", "signature", "x-amz-signature", "x-amz-credential", "x-goog-signature", "x-goog-credential",
    "pass", "passphrase", "pw",
)
# After these words `password` is prose (`password reset failed`), not followed by the password.
PROSE_AFTER_PASSWORD: frozenset[str] = frozenset({
    "a", "an", "and", "are", "as", "at", "auth", "authentication", "by", "change", "changed", "check", "expired",
    "failed", "file", "for", "from", "has", "have", "in", "incorrect", "invalid", "is", "must", "not", "of", "on",
    "or", "policy", "prompt", "required", "reset", "set", "the", "to", "was", "will", "with", "wrong",
})
