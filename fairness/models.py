"""The domain: who may call (keys, tiers), what serves them (replicas), what happened (usage)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models.functions import Cast
from django.utils import timezone

model_name_validator = RegexValidator(r"^[^|\s]+$", "A model name has no spaces or '|'.")
MAX_ALLOWED_MODELS = 50


def check_allowed_models(names: object) -> list[str]:
    """A tier's or an account's `allowed_models`: a list of at most MAX_ALLOWED_MODELS model
    names, each as a replica's model is named. Returns them each once, in the order given;
    raises ValidationError on `allowed_models`."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValidationError({"allowed_models": "A list of model names."})
    if len(names) > MAX_ALLOWED_MODELS:
        raise ValidationError({"allowed_models": f"At most {MAX_ALLOWED_MODELS} models."})
    for name in names:
        if not name or len(name) > 200:
            raise ValidationError({"allowed_models": "A model name is 1 to 200 characters."})
        try:
            model_name_validator(name)
        except ValidationError:
            raise ValidationError({"allowed_models": f"{name!r}: a model name has no spaces or '|'."}) from None
    return list(dict.fromkeys(names))


class Tier(models.Model):
    """A quota class: how many requests a key may run at once and how it queues."""

    name = models.SlugField(max_length=40, unique=True)
    description = models.CharField(max_length=200, blank=True)
    per_key_concurrency = models.PositiveIntegerField(default=2, validators=[MinValueValidator(1)])
    pool_concurrency = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Requests in flight across all keys of this tier; empty for no pool cap.",
    )
    head_start_seconds = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0)],
        help_text="Ageing: a request of this tier ranks as if it had already waited this long.",
    )
    max_queue_wait_seconds = models.FloatField(default=300.0, validators=[MinValueValidator(0.0)])
    max_queued_per_key = models.PositiveIntegerField(default=64, validators=[MinValueValidator(1)])
    max_queued = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Requests waiting across all keys of this tier; one more gets 429 at once. Empty "
        "for no tier bound (the gateway's GP_MAX_QUEUED_TOTAL still applies).",
    )
    engine_priority = models.IntegerField(
        default=0,
        help_text="Lower runs first: sent with each request to replicas that schedule by priority "
        "(vLLM's priority policy); replicas that serve first come, first served ignore it.",
    )
    borrow_idle_slots = models.BooleanField(
        default=False,
        help_text="May exceed its caps with idle engine slots while nobody else is waiting.",
    )
    queue_events = models.BooleanField(
        default=True,
        help_text="A streamed request that waits over GP_QUEUE_EVENTS_AFTER_MS starts its stream and is "
        "told its place in line every second (SSE comments, which clients ignore); off: it gets a plain "
        "429 if it times out, and no byte before its answer.",
    )
    fairshare_weight_seconds = models.FloatField(
        default=300.0,
        validators=[MinValueValidator(0.0)],
        help_text="Fair share: a request of an account that has used its whole share and more "
        "ranks as if it had waited up to this much less than one of an account that has used "
        "nothing. 0 turns fair share off for this tier.",
    )
    allowed_models = models.JSONField(
        default=list, blank=True, help_text="Models its keys may use; empty for every model."
    )
    self_service_keys = models.BooleanField(
        default=True,
        help_text="Its users may make and rotate their own keys on their page (anyone may revoke their own).",
    )
    max_key_days = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="The longest a key its users make themselves may live; empty for no limit.",
    )
    key_requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Requests a minute one key may start; empty for no limit.",
    )
    key_tokens_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Weighted tokens a minute one key may use (counted at max_tokens when it starts); "
        "empty for no limit.",
    )
    requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Requests a minute all its keys together may start; empty for no limit.",
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Weighted tokens a minute all its keys together may use; empty for no limit.",
    )
    # On by default: without it any user can time another's prompts (a 6x first-token gap).
    isolate_prefix_cache = models.BooleanField(
        default=True,
        help_text="Cached prompt prefixes are reused only within one user's requests (vLLM's "
        "cache_salt), so no user can time another's prompts. The cost: a system prompt the "
        "users share is prefilled once per user, not once; with 8 users sharing a 2,000-token "
        "one, each one's first answer started 0.8 s later, their later turns hit their own "
        "cache (bench/isolation.py). Turn off only for users who trust each other.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.pool_concurrency is not None and self.pool_concurrency < self.per_key_concurrency:
            raise ValidationError(
                {"pool_concurrency": "The pool must allow at least one key's full concurrency."}
            )
        self.allowed_models = check_allowed_models(self.allowed_models)


class Credential:
    """What API keys and admin tokens share: a visible prefix, an expiry and a revocation."""

    prefix: str
    owner: Any
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.owner})"

    def is_expired(self, now: dt.datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])  # type: ignore[attr-defined]


account_name_validator = RegexValidator(
    r"^[\w.@+-]+$", "Letters, digits and . @ + - _ only (no spaces or '|')."
)


class Account(models.Model):
    """A node of the fair-share tree (a lab, a project under it, ...): whose share work counts
    against. Tiers say how fast and how many at once; accounts say whose turn it is."""

    name = models.CharField(max_length=100, unique=True, validators=[account_name_validator])
    parent = models.ForeignKey(
        "self", models.PROTECT, null=True, blank=True, related_name="children"
    )
    shares = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="Its part of the parent's share, relative to its siblings' shares.",
    )
    description = models.CharField(max_length=200, blank=True)
    allowed_models = models.JSONField(
        default=list, blank=True,
        help_text="Models its members' keys may use (and those of accounts under it); empty for every model.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        self.allowed_models = check_allowed_models(self.allowed_models)
        ancestor = self.parent
        while ancestor is not None:
            if ancestor.pk == self.pk:
                raise ValidationError({"parent": "An account cannot sit under itself."})
            ancestor = ancestor.parent


class Membership(models.Model):
    """A user's association with an account: what their keys charge. Slurm's association."""

    account = models.ForeignKey(Account, models.PROTECT, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="memberships")
    shares = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="Their part of the account's share, relative to the other members'.",
    )
    is_default = models.BooleanField(default=False, help_text="Charged by keys that name no account.")
    is_manager = models.BooleanField(
        default=False,
        help_text="Manages the account and the accounts under it: members, their keys, sub-accounts, "
                  "shares and budgets, within what staff gave the account (actions/lab_managers.py).",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["account__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["account", "user"], name="one_membership_per_account"),
            models.UniqueConstraint(
                fields=["user"], condition=models.Q(is_default=True), name="one_default_account"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.account}"


class GroupMapping(models.Model):
    """An identity provider's group (OIDC claim or LDAP group DN) and what its members get here:
    membership of an account and, for keys they make themselves, a tier. Synced at every sign-in;
    someone in no mapped group has no access."""

    group = models.CharField(max_length=300, unique=True, help_text="e.g. cn=nlp-lab,ou=groups,dc=uni,dc=example")
    account = models.ForeignKey(Account, models.CASCADE, related_name="group_mappings")
    tier = models.ForeignKey(Tier, models.PROTECT, related_name="group_mappings")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["group"]

    def __str__(self) -> str:
        return f"{self.group} → {self.account} ({self.tier})"


class SsoIdentity(models.Model):
    """An account at the OpenID provider, named by what the provider never reuses (its issuer and
    the subject it gives the person), and the portal user it signs in as. Usernames are not
    identities: a provider may rename someone, or let a new person take a freed name."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)  # OpenID Connect caps `sub` at 255 ASCII characters
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="sso_identities")
    made_user = models.BooleanField(
        default=False, help_text="Its first sign-in made the user (the provider then owns their e-mail address); "
        "otherwise a superuser linked an existing account to it.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["issuer", "subject"]
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_sso_identity")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer} → {self.user}"


class Budget(models.Model):
    """A token allowance per period on an account (its whole subtree), one member's association
    with an account, or one key. Counts weighted tokens, as fair share does. A budget with `until`
    is a temporary one (a raise before a deadline): until then it replaces the standing budget of
    the same holder and period."""

    class Period(models.TextChoices):
        DAY = "day", "day"
        WEEK = "week", "week"
        MONTH = "month", "month"
        ROLLING = "rolling", "rolling window"

    account = models.ForeignKey(Account, models.CASCADE, null=True, blank=True, related_name="budgets")
    membership = models.ForeignKey(Membership, models.CASCADE, null=True, blank=True, related_name="budgets")
    key = models.ForeignKey("ApiKey", models.CASCADE, null=True, blank=True, related_name="budgets")
    tokens = models.PositiveBigIntegerField(validators=[MinValueValidator(1)], help_text="Weighted tokens.")
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTH)
    window_hours = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="The rolling window's length; only for a rolling budget.",
    )
    until = models.DateTimeField(null=True, blank=True, help_text="A temporary budget ends then.")
    created_at = models.DateTimeField(default=timezone.now)
    # The period (its start, ISO) whose 80% notice has gone out: one notice per period.
    noticed_period = models.CharField(max_length=40, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(account__isnull=False, membership=None, key=None)
                    | models.Q(account=None, membership__isnull=False, key=None)
                    | models.Q(account=None, membership=None, key__isnull=False)
                ),
                name="budget_has_one_holder",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.holder_name}: {self.tokens:,} per {self.get_period_display()}"

    @property
    def holder_name(self) -> str:
        if self.account is not None:
            return f"account {self.account}"
        if self.membership is not None:
            return f"{self.membership.user} in {self.membership.account}"
        return f"key {self.key.prefix}…" if self.key is not None else "nobody"

    def clean(self) -> None:
        if self.period == self.Period.ROLLING and not self.window_hours:
            raise ValidationError({"window_hours": "A rolling budget needs the window's length."})
        if self.period != self.Period.ROLLING and self.window_hours:
            raise ValidationError({"window_hours": "Only a rolling budget has a window length."})


class FairShareUsage(models.Model):
    """The database's copy of one association's decayed usage (Redis holds the live value)."""

    membership = models.OneToOneField(Membership, models.CASCADE, related_name="fairshare_usage")
    usage = models.FloatField(default=0.0, help_text="Weighted tokens, decayed to `as_of`.")
    as_of = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.membership}: {self.usage:.0f} at {self.as_of:%Y-%m-%d %H:%M}"


def _lowest(*figures: int | None) -> int | None:
    known = [f for f in figures if f is not None]
    return min(known) if known else None


@dataclass(frozen=True)
class KeyLimits:
    """What one key may be narrowed to below its tier, never above: each figure at most the
    tier's, its models among the tier's. None, or no models: the tier's own. The gateway applies
    the lower of the key's and the tier's when it loads the key, so a tier lowered later wins."""

    max_concurrent: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    allowed_models: tuple[str, ...] = ()

    FIELDS: ClassVar[tuple[str, ...]] = ("max_concurrent", "requests_per_minute", "tokens_per_minute",
                                         "allowed_models")

    @classmethod
    def of(cls, key: ApiKey) -> KeyLimits:
        return cls(key.max_concurrent, key.requests_per_minute, key.tokens_per_minute,
                   tuple(key.allowed_models or ()))

    def fields(self) -> dict[str, Any]:
        """The ApiKey columns, as saved."""
        return {"max_concurrent": self.max_concurrent, "requests_per_minute": self.requests_per_minute,
                "tokens_per_minute": self.tokens_per_minute, "allowed_models": list(self.allowed_models)}

    @staticmethod
    def ceilings(tier: Tier) -> dict[str, int | None]:
        """The most a key of `tier` may be given of each figure (None: the tier sets no limit).
        A key's rate is bounded by the tier's per-person and tier-wide rates both: it can
        never run faster than either."""
        return {"max_concurrent": tier.per_key_concurrency,
                "requests_per_minute": _lowest(tier.key_requests_per_minute, tier.requests_per_minute),
                "tokens_per_minute": _lowest(tier.key_tokens_per_minute, tier.tokens_per_minute)}

    def refusals(self, tier: Tier, only: Iterable[str] = FIELDS) -> dict[str, str]:
        """Field → why its value is above the tier's; empty when every field in `only` is within."""
        found: dict[str, str] = {}
        ceilings = self.ceilings(tier)
        for field in only:
            if field == "allowed_models":
                outside = [m for m in self.allowed_models if tier.allowed_models and m not in tier.allowed_models]
                if outside:
                    found[field] = (f"{', '.join(outside)}: not among the {tier.name} tier's models "
                                    f"({', '.join(tier.allowed_models)}).")
                continue
            value, ceiling = getattr(self, field), ceilings[field]
            if value is not None and value < 1:
                found[field] = "At least 1; leave it empty for the tier's."
            elif value is not None and ceiling is not None and value > ceiling:
                found[field] = f"At most {ceiling:,}, the {tier.name} tier's: a key may be given less, never more."
        return found

    def narrowed(self, tier: Tier) -> list[str]:
        """In words, each figure that holds the key below its tier now ("1 at once (tier: 4)")."""
        ceilings, words = self.ceilings(tier), []
        units = {"max_concurrent": "at once", "requests_per_minute": "requests a minute",
                 "tokens_per_minute": "tokens a minute"}
        for field, unit in units.items():
            value, ceiling = getattr(self, field), ceilings[field]
            if value is not None and (ceiling is None or value < ceiling):
                tier_says = f"{ceiling:,}" if ceiling is not None else "no limit"
                words.append(f"{value:,} {unit} (tier: {tier_says})")
        if self.allowed_models and set(self.allowed_models) != set(tier.allowed_models):
            words.append("models: " + ", ".join(self.allowed_models))
        return words


NO_KEY_LIMITS = KeyLimits()  # the tier's own, all of it


class ApiKey(Credential, models.Model):
    """A client credential. Only the SHA-256 of the secret is stored."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="api_keys")
    tier = models.ForeignKey(Tier, models.PROTECT, related_name="api_keys")
    # The association its requests charge (fair share). Always set by issue_key; null only for
    # rows written around it, which charge their owner's default association.
    # RESTRICT, not PROTECT: deleting a user takes their keys and memberships together.
    membership = models.ForeignKey(
        Membership, models.RESTRICT, null=True, blank=True, related_name="api_keys"
    )
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True, help_text="Visible start of the secret.")
    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="Who issued it: staff, or its owner on their own page; empty for a command.",
    )
    made_by_command = models.CharField(
        max_length=150, blank=True, editable=False,
        help_text="Who ran the command that issued it (as the audit log names them: os:root), when no one "
        "signed in did.",
    )
    replaced_by = models.ForeignKey(
        "self", models.SET_NULL, null=True, blank=True, related_name="+", editable=False,
        help_text="The key a rotation made in its place.",
    )
    expiry_noticed_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A front end (Open WebUI) speaks for many people through one key: each request names its
    # person, and that person's limits, share and budgets apply (gateway/front_end_people.py).
    front_end = models.CharField(
        max_length=16, blank=True, choices=[("", "None: the key speaks for its owner"), ("openwebui", "Open WebUI")],
        help_text="Requests through it name the person asking (Open WebUI's forwarded user).",
    )
    # The front end's JWT signing secret, sealed with the portal's SECRET_KEY (front_end_secrets.py):
    # the gateway must check signatures with it, so it cannot be stored as a hash.
    front_end_secret = models.TextField(blank=True, editable=False)
    front_end_trusts_plain_headers = models.BooleanField(
        default=False,
        help_text="Accept the unsigned X-OpenWebUI-User-* headers. Weaker: anyone holding the key can name any person.",
    )
    front_end_adds_people = models.BooleanField(
        default=True,
        help_text="A person the portal does not know yet is added on first sight, as a member of this key's account.",
    )
    # Narrower than its tier, never wider (clean() and key_limits.py): empty is the tier's figure.
    max_concurrent = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Requests this key may run at once; empty for its tier's.",
    )
    requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Requests a minute this key may start; empty for its tier's.",
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Weighted tokens a minute this key may use; empty for its tier's.",
    )
    allowed_models = models.JSONField(
        default=list, blank=True, help_text="Models this key may use, among its tier's; empty for its tier's.",
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def clean(self) -> None:
        self.allowed_models = check_allowed_models(self.allowed_models)
        refusals = KeyLimits.of(self).refusals(self.tier)
        if refusals:
            raise ValidationError(refusals)



def validate_engine_url(value: str) -> None:
    """An engine's base URL: http or https to a host, nothing a request could smuggle along
    (credentials, a query, a fragment)."""
    try:
        parts = urlsplit(value)
    except ValueError:  # an unclosed [IPv6] bracket, say: the URL validator names it
        return
    if parts.scheme.lower() not in ("http", "https"):
        raise ValidationError("Use an http:// or https:// address.", code="scheme")
    if "@" in parts.netloc:
        raise ValidationError(
            "Put no user name or password in the address; the engine's key goes in its own field.",
            code="userinfo",
        )
    if parts.query or "?" in value:
        raise ValidationError("Leave out the query (?…): the gateway adds the request path.", code="query")
    if parts.fragment or "#" in value:
        raise ValidationError("Leave out the fragment (#…).", code="fragment")


class Replica(models.Model):
    """One inference engine the gateway forwards to."""

    class Kind(models.TextChoices):
        VLLM = "vllm", "vLLM"
        LLAMACPP = "llamacpp", "llama.cpp"
        SGLANG = "sglang", "SGLang"
        TGI = "tgi", "TGI"

    class Policy(models.TextChoices):
        FCFS = "fcfs", "first come, first served"
        PRIORITY = "priority", "priority"

    class ModelKind(models.TextChoices):
        # What the engine runs the model as (vLLM: the generate runner, or the pooling runner
        # converting to embeddings or to a one-label classifier, a cross-encoder), and so which
        # endpoints may be sent to it. vLLM scores and reranks with either pooling kind.
        CHAT = "chat", "chat and completions"
        EMBEDDING = "embedding", "embeddings (and rerank, score)"
        RERANKER = "reranker", "rerank and score (a cross-encoder)"

    name = models.SlugField(max_length=60, unique=True)
    base_url = models.URLField(
        validators=[validate_engine_url], help_text="Without /v1, e.g. http://10.0.0.5:8000"
    )
    model = models.CharField(
        max_length=200,
        validators=[model_name_validator],
        help_text="The served model name clients ask for.",
    )
    engine_kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.VLLM)
    model_kind = models.CharField(
        max_length=16, choices=ModelKind.choices, default=ModelKind.CHAT,
        help_text="What the model serves: an embedding model (vLLM's pooling runner) takes /v1/embeddings, "
        "/v1/rerank and /v1/score; a reranker (a cross-encoder) only the last two.",
    )
    # When it was added: the earliest of a model's replicas is the model's `created` on /v1/models.
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    max_num_seqs = models.PositiveIntegerField(default=8, validators=[MinValueValidator(1)])
    scheduling_policy = models.CharField(max_length=16, choices=Policy.choices, default=Policy.FCFS)
    enabled = models.BooleanField(default=True)
    draining = models.BooleanField(
        default=False, help_text="Finish what is in flight, take nothing new (before maintenance)."
    )
    api_key = models.CharField(
        max_length=200,
        blank=True,
        # Sent in a header: a line break would let it add headers of its own.
        validators=[RegexValidator(r"[\x00-\x1f\x7f]", "The engine key cannot contain control characters "
                                   "(line breaks, tabs and the like).", inverse_match=True)],
        help_text="The engine's own key, if any.",
    )
    gpu_metrics_url = models.URLField(
        blank=True,
        validators=[validate_engine_url],
        help_text="Its GPU's DCGM exporter, if any, e.g. http://10.0.0.5:9400/metrics.",
    )
    tiers = models.ManyToManyField(
        Tier,
        blank=True,
        related_name="replicas",
        help_text="Serve only these tiers (a deployment of their own); none means every tier.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class UsageRecordQuerySet(models.QuerySet["UsageRecord"]):
    """The request log's queries (the staff page, one's own, their CSV): newest first, a page at
    a time by keyset on (created_at, id), so a page deep in a table of millions costs what the
    first does. With a person, the (person, created_at) index answers it."""

    def matching(
        self, *, person_id: int | None = None, key_prefix: str = "", model: str = "", status: int | None = None,
        ended: str = "", start: dt.datetime | None = None, end: dt.datetime | None = None,
    ) -> UsageRecordQuerySet:
        """The rows the log's filters pick (empty or None: any); `end` is not included."""
        rows = self
        if person_id is not None:
            rows = rows.filter(person_id=person_id)
        if key_prefix:
            rows = rows.filter(key__prefix=key_prefix)
        if model:
            rows = rows.filter(model=model)
        if status is not None:
            rows = rows.filter(status=status)
        if ended:
            rows = rows.filter(ended=ended)
        if start is not None:
            rows = rows.filter(created_at__gte=start)
        if end is not None:
            rows = rows.filter(created_at__lt=end)
        return rows

    def newest_first(self) -> UsageRecordQuerySet:
        return self.order_by("-created_at", "-id")

    def older_than(self, at: dt.datetime, row_id: int) -> UsageRecordQuerySet:
        """The rows after (at, row_id) in newest-first order. Written as a range on created_at
        and then the tie, so the index's range scan does the work (an OR alone defeats it)."""
        return self.filter(created_at__lte=at).filter(
            models.Q(created_at__lt=at) | models.Q(id__lt=row_id)).newest_first()

    def newer_than(self, at: dt.datetime, row_id: int) -> UsageRecordQuerySet:
        """The rows before (at, row_id) in newest-first order, nearest first (oldest first)."""
        return self.filter(created_at__gte=at).filter(
            models.Q(created_at__gt=at) | models.Q(id__gt=row_id)).order_by("created_at", "id")


class UsageRecord(models.Model):
    """One proxied request, written in batches off the request path: also the request log (what
    happened to a request: what held it, how it ended). It never holds a prompt or an answer."""

    class HeldBy(models.TextChoices):
        # The names admission gives (scheduling/admission.py HELD_BY; a test holds them together).
        PERSON_CAP = "person_cap", "own cap"
        TIER_POOL = "tier_pool", "tier pool"
        NO_SLOT = "no_slot", "no free slot"
        FAIR_SHARE_ORDER = "fair_share_order", "others ahead"

    class Ended(models.TextChoices):
        DONE = "done", "done"
        CLIENT_GONE = "client_gone", "client went away"
        ENGINE_ERROR = "engine_error", "engine error"
        REFUSED = "refused", "refused"
        SHUTDOWN = "shutdown", "cut off at shutdown"

    key = models.ForeignKey(ApiKey, models.CASCADE, related_name="usage")
    # Who asked: the key's owner, or the person a front-end key spoke for. (Null only for a row
    # written around the gateway; migration 0023 filled in the older ones from their keys.)
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, null=True, blank=True, related_name="usage_asked",
    )
    # The association its work was charged to (fair share, and the budgets of it and its accounts):
    # the key's, or that of the person a front end spoke for in the front end's account.
    membership = models.ForeignKey(
        Membership, models.SET_NULL, null=True, blank=True, related_name="usage",
    )
    request_id = models.CharField(max_length=40)
    endpoint = models.CharField(max_length=40)
    model = models.CharField(max_length=200)
    replica = models.CharField(max_length=60, blank=True)
    status = models.PositiveSmallIntegerField()
    stream = models.BooleanField(default=False)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(
        default=0, help_text="Prompt tokens the engine found in its prefix cache (already in prompt_tokens).",
    )
    queued_ms = models.PositiveIntegerField(default=0)
    queue_estimate_ms = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="The wait the gateway estimated when the request queued (empty: it never queued); "
        "beside queued_ms, how true the estimate was.",
    )
    ttft_ms = models.PositiveIntegerField(null=True)
    latency_ms = models.PositiveIntegerField(default=0)
    tier = models.CharField(max_length=40, blank=True, help_text="The key's tier when it ran.")
    prompt_count_source = models.CharField(
        max_length=12, blank=True,
        help_text="engine (its usage counts), tokenize (counted by the engine after the client left), "
        "estimate (body bytes at the measured bytes per token), prompt_ids; blank before it was recorded.",
    )
    completion_count_source = models.CharField(
        max_length=12, blank=True,
        help_text="engine (its usage counts), events (content events relayed before the client left), "
        "unknown (a whole answer abandoned before it came: 0); blank before it was recorded.",
    )
    held_by = models.CharField(
        max_length=16, blank=True, choices=HeldBy.choices,
        help_text="What held it in the queue when it waited (the last reason admission gave); blank: it never "
        "waited, or it ran before this was recorded.",
    )
    refusal = models.CharField(
        max_length=32, blank=True,
        help_text="Admission's code when it refused the request (queue_full, queue_timeout, rate_limited, "
        "budget_exceeded); blank otherwise.",
    )
    ended = models.CharField(
        max_length=12, blank=True, choices=Ended.choices,
        help_text="How it ended; blank before this was recorded.",
    )
    created_at = models.DateTimeField(db_index=True)  # when it arrived (the event's `at`)

    objects = UsageRecordQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["key", "created_at"]),
            models.Index(fields=["person", "created_at"], name="usage_person_time"),
            models.Index(fields=["membership", "created_at"], name="usage_membership_time"),
        ]
        # One row per request: the gateway may push an event again (accounting/usage.py).
        constraints = [models.UniqueConstraint(fields=["request_id"], name="usage_one_row_per_request")]

    def __str__(self) -> str:
        return f"{self.request_id} ({self.status})"


class EngineSample(models.Model):
    """One poll of one replica's /metrics, or (resolution > 0) the average of several."""

    replica = models.ForeignKey(Replica, models.CASCADE, related_name="samples")
    taken_at = models.DateTimeField()
    resolution_seconds = models.PositiveIntegerField(default=0, help_text="0 for a raw poll.")
    healthy = models.BooleanField(default=True)
    running = models.FloatField(default=0)
    waiting = models.FloatField(default=0, help_text="In the engine's own queue.")
    gateway_waiting = models.FloatField(default=0, help_text="Held in the gateway's queue for this model.")
    kv_usage = models.FloatField(null=True)
    generation_tps = models.FloatField(null=True)
    prompt_tps = models.FloatField(null=True)
    prefix_hit_rate = models.FloatField(null=True)
    # From the replica's DCGM exporter, when it names one (null otherwise, or when the exporter
    # did not answer sensibly): mean utilisation, framebuffer and power summed over its GPUs,
    # the hottest GPU's temperature, and how many GPUs that covers.
    gpu_util = models.FloatField(null=True, help_text="Per cent, the mean over its GPUs.")
    gpu_mem_used_mib = models.FloatField(null=True, help_text="Framebuffer used, summed over its GPUs.")
    gpu_mem_total_mib = models.FloatField(null=True, help_text="Framebuffer used + free (+ reserved), summed.")
    gpu_power_w = models.FloatField(null=True, help_text="Power draw, summed over its GPUs.")
    gpu_temp_c = models.FloatField(null=True, help_text="The hottest GPU's temperature.")
    gpu_count = models.PositiveSmallIntegerField(null=True)

    class Meta:
        ordering = ["-taken_at"]
        indexes = [models.Index(fields=["replica", "taken_at"]), models.Index(fields=["taken_at"])]

    def __str__(self) -> str:
        return f"{self.replica_id} at {self.taken_at:%Y-%m-%d %H:%M:%S}"


class SaturationAlert(models.Model):
    """Demand persistently above capacity: "a queue that is always full is a capacity decision"."""

    class Kind(models.TextChoices):
        QUEUE = "queue", "queue persistently full"
        KV = "kv", "KV cache persistently full"
        # Not about an engine: the gateway's usage backlog hit GP_USAGE_BACKLOG_MAX (staff only).
        USAGE = "usage", "usage events dropped"

    model = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    figures = models.JSONField(default=dict, help_text="What opened it: waiting, running, ratio, KV usage.")

    class Meta:
        ordering = ["-opened_at"]

    def __str__(self) -> str:
        return f"{self.model}: {self.get_kind_display()} since {self.opened_at:%Y-%m-%d %H:%M}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None



QUEUE_WAIT_BUCKETS_MS = (0, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000)


class UsageHourly(models.Model):
    """Usage per key per hour: what the pages read, so they stay fast with millions of requests."""

    key = models.ForeignKey(ApiKey, models.CASCADE, related_name="hourly_usage")
    # Who asked (a front end's key speaks for many people): the pages show each person theirs.
    person = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, null=True, related_name="hourly_usage")
    hour = models.DateTimeField()
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    # Requests per queue-wait bucket (upper bounds in QUEUE_WAIT_BUCKETS_MS, then "more"), so
    # medians and p95s can be read back without the raw records.
    queue_wait_counts = models.JSONField(default=list)

    class Meta:
        ordering = ["-hour"]
        constraints = [models.UniqueConstraint(fields=["key", "person", "hour"], name="one_row_per_key_person_hour")]

    def __str__(self) -> str:
        return f"{self.key_id} at {self.hour:%Y-%m-%d %H:00}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.person_id is None:  # a row written around the flush: its key's owner asked
            self.person_id = ApiKey.objects.filter(pk=self.key_id).values_list("owner_id", flat=True).first()
        super().save(*args, **kwargs)


class AuditEntryQuerySet(models.QuerySet["AuditEntry"]):
    def matching(self, *, actor: str = "", action: str = "", target: str = "", text: str = "") -> AuditEntryQuerySet:
        """The entries the audit page's filters pick: one actor and one action exactly (they are
        chosen from the log's own values), a target containing `target`, and `text` found in
        the actor, action, target or detail (the detail as its stored JSON text). Empty: any."""
        entries = self
        if actor:
            entries = entries.filter(actor_name=actor)
        if action:
            entries = entries.filter(action=action)
        if target:
            entries = entries.filter(target__icontains=target)
        if text:
            entries = entries.annotate(detail_text=Cast("detail", models.TextField())).filter(
                models.Q(actor_name__icontains=text) | models.Q(action__icontains=text)
                | models.Q(target__icontains=text) | models.Q(detail_text__icontains=text)
            )
        return entries

    def actor_names(self) -> list[str]:
        return list(self.order_by("actor_name").values_list("actor_name", flat=True).distinct())

    def actions(self) -> list[str]:
        return list(self.order_by("action").values_list("action", flat=True).distinct())


class AuditEntry(models.Model):
    """Who changed what, when, from where. The app only ever appends."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+")
    actor_name = models.CharField(max_length=150, help_text="Kept if the actor is deleted.")
    action = models.CharField(max_length=40)
    target = models.CharField(max_length=200)
    detail = models.JSONField(default=dict)
    ip = models.GenericIPAddressField(null=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-at"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.target}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("audit entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("audit entries are append-only")


class AdminTokenQuerySet(models.QuerySet["AdminToken"]):
    def usable(self, now: dt.datetime | None = None) -> AdminTokenQuerySet:
        """Tokens that authenticate now: live, unexpired, and held by active staff (a token is
        worth no more than its owner's own sign-in, so losing staff status stops it too)."""
        return self.filter(revoked_at=None, owner__is_active=True, owner__is_staff=True).filter(
            models.Q(expires_at=None) | models.Q(expires_at__gt=now or timezone.now())
        )

    def for_listing(self) -> AdminTokenQuerySet:
        return self.select_related("owner")


class AdminToken(Credential, models.Model):
    """A credential for the admin JSON API, for scripts; stored hashed like API keys."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="admin_tokens")
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = AdminTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]



BATCH_FILES_STORAGE = "batch_files"  # the STORAGES entry batch files are kept in


def _owner_made(key_id: int, owner_id: int) -> models.Exists:
    """Whether the key is one its owner made themselves: only they have seen its secret. Staff
    (or a command's operator) saw the secret of any key they issued, so such a key reaches only
    what it brought in itself."""
    return models.Exists(ApiKey.objects.filter(pk=key_id, owner_id=owner_id, created_by_id=owner_id))


class BatchFileState(models.TextChoices):
    UPLOADING = "uploading"  # its room reserved, its content still arriving: nobody sees it yet
    STORED = "stored"


class BatchFileQuerySet(models.QuerySet["BatchFile"]):
    def of_owner(self, owner_id: int) -> BatchFileQuerySet:
        """One person's stored files (their own pages show them all)."""
        return self.filter(owner_id=owner_id, state=BatchFileState.STORED)

    def reachable_by(self, key_id: int, owner_id: int) -> BatchFileQuerySet:
        """The files a key may see: its owner's, all of them for a key the owner made, else only
        those it uploaded or its batches wrote."""
        return self.of_owner(owner_id).filter(models.Q(uploaded_with_id=key_id) | _owner_made(key_id, owner_id))

    def touch(self, now: dt.datetime | None = None) -> int:
        """Mark these files used now: retention counts from a file's last use."""
        return self.update(last_used_at=now or timezone.now())

    def storage_by_owner(self) -> models.QuerySet[Any]:
        """What each person's stored files hold, most bytes first: {owner_id, username, files, bytes}."""
        return (
            self.filter(state=BatchFileState.STORED).order_by().values("owner_id", username=models.F("owner__username"))
            .annotate(files=models.Count("pk"), bytes=models.Sum("bytes")).order_by("-bytes", "username")
        )


class BatchFile(models.Model):
    """A file uploaded through /v1/files (OpenAI's Files API), for the Batch API, or a batch's
    results. It belongs to the key's owner: any key they made themselves reads it, a key issued
    for them only what it brought in (BatchFileQuerySet.reachable_by). The content is in the
    batch_files storage under `stored_name`, a random name that never comes from the client."""

    public_id = models.CharField(max_length=40, unique=True, editable=False, help_text='"file-…", as the API shows it.')
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="batch_files")
    uploaded_with = models.ForeignKey(
        "ApiKey", models.SET_NULL, null=True, blank=True, related_name="+", help_text="The key that uploaded it."
    )
    purpose = models.CharField(max_length=32)
    filename = models.CharField(max_length=255, help_text="As the client named it (its last part only).")
    bytes = models.PositiveBigIntegerField()
    stored_name = models.CharField(max_length=255, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    state = models.CharField(max_length=12, choices=BatchFileState.choices, default=BatchFileState.STORED)
    last_used_at = models.DateTimeField(
        default=timezone.now, help_text="Uploaded, read, or a batch's input: kept GP_FILE_RETENTION_DAYS after this."
    )

    objects = BatchFileQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["owner", "purpose", "id"])]

    def __str__(self) -> str:
        return f"{self.public_id} ({self.filename})"


class BatchStatus(models.TextChoices):
    """OpenAI's batch statuses: validating → in_progress → finalizing → completed; failed (the
    input could not be read at all), expired (the window ended first), cancelling → cancelled."""

    VALIDATING = "validating"
    FAILED = "failed"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


class BatchQuerySet(models.QuerySet["Batch"]):
    def of_owner(self, owner_id: int) -> BatchQuerySet:
        return self.filter(owner_id=owner_id)

    def reachable_by(self, key_id: int, owner_id: int) -> BatchQuerySet:
        """The batches a key may see: its owner's, all of them for a key the owner made, else
        only those it created (see _owner_made)."""
        return self.of_owner(owner_id).filter(models.Q(api_key_id=key_id) | _owner_made(key_id, owner_id))

    def unfinished(self) -> BatchQuerySet:
        """Batches a runner still has work on (finalizing too: a runner that died there left it)."""
        return self.filter(status__in=Batch.UNFINISHED)


class Batch(models.Model):
    """A batch created through /v1/batches (OpenAI's Batch API): the lines of its input file, run
    by the batch runner (fairness/batch/runner.py) through admission as requests of `api_key`."""

    UNFINISHED = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING, BatchStatus.CANCELLING)

    public_id = models.CharField(
        max_length=40, unique=True, editable=False, help_text='"batch_…", as the API shows it.'
    )
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="batches")
    api_key = models.ForeignKey(
        "ApiKey", models.CASCADE, related_name="batches", help_text="The key it was created with, and runs as."
    )
    input_file = models.ForeignKey(BatchFile, models.SET_NULL, null=True, blank=True, related_name="+")
    input_file_public_id = models.CharField(max_length=40, help_text="Kept after the input file is deleted.")
    input_bytes = models.PositiveBigIntegerField(
        default=0, help_text="Its input file's size: its lines count against its owner's quota until it ends."
    )
    endpoint = models.CharField(max_length=40)
    completion_window = models.CharField(max_length=8, default="24h")
    metadata = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=BatchStatus.choices, default=BatchStatus.VALIDATING)
    errors = models.JSONField(null=True, blank=True, help_text="Why the batch failed, as OpenAI's errors list.")
    output_file = models.ForeignKey(BatchFile, models.SET_NULL, null=True, blank=True, related_name="+")
    error_file = models.ForeignKey(BatchFile, models.SET_NULL, null=True, blank=True, related_name="+")
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # The runner that holds it: a token, and when it last said it still did. Another runner takes
    # it over once that is older than GP_BATCH_CLAIM_SECONDS (its runner died).
    runner = models.CharField(max_length=64, blank=True, editable=False)
    runner_seen_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = BatchQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["owner", "id"]), models.Index(fields=["status"])]
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return f"{self.public_id} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status not in self.UNFINISHED


class BatchLineState(models.TextChoices):
    PENDING = "pending"  # to run, or running: the runner knows which
    DONE = "done"  # answered 200: in the output file
    FAILED = "failed"  # invalid, refused or answered an error: in the error file


class BatchLine(models.Model):
    """One request of a batch's input file, and what became of it. A result is written only by
    the runner that holds the batch's claim, so a line completes once however often runners die
    and resume it."""

    batch = models.ForeignKey(Batch, models.CASCADE, related_name="lines")
    index = models.PositiveIntegerField(help_text="Its line in the input file, from 0.")
    custom_id = models.CharField(max_length=512)
    body = models.TextField(blank=True, help_text="The request body, as JSON text.")
    state = models.CharField(max_length=8, choices=BatchLineState.choices, default=BatchLineState.PENDING)
    request_id = models.CharField(max_length=80, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.TextField(blank=True, help_text="The answer's body (JSON text).")
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["batch", "index"]
        constraints = [models.UniqueConstraint(fields=["batch", "index"], name="batch_line_index_unique")]
        indexes = [models.Index(fields=["batch", "state", "index"])]

    def __str__(self) -> str:
        return f"{self.batch_id}:{self.index} {self.custom_id} ({self.state})"
