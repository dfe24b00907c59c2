"""The domain: who may call (keys, tiers), what serves them (replicas), what happened (usage)."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone


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
    engine_priority = models.IntegerField(
        default=0, help_text="Sent as `priority` to replicas using vLLM's priority policy."
    )
    borrow_idle_slots = models.BooleanField(
        default=False,
        help_text="May exceed its caps with idle engine slots while nobody else is waiting.",
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

    def policy_sentence(self) -> str:
        """The tier's policy in plain words, for the pages."""
        parts = [f"{self.per_key_concurrency} at a time per key"]
        if self.pool_concurrency:
            parts.append(f"{self.pool_concurrency} in total across all {self.name} keys")
        if self.head_start_seconds:
            parts.append(f"goes ahead of requests that have waited up to {self.head_start_seconds:g} s")
        return "; ".join(parts)


class ApiKey(models.Model):
    """A client credential. Only the SHA-256 of the secret is stored."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="api_keys")
    tier = models.ForeignKey(Tier, models.PROTECT, related_name="api_keys")
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True, help_text="Visible start of the secret.")
    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.owner})"

    def is_expired(self, now: dt.datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


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

    name = models.SlugField(max_length=60, unique=True)
    base_url = models.URLField(help_text="Without /v1, e.g. http://10.0.0.5:8000")
    model = models.CharField(
        max_length=200,
        validators=[RegexValidator(r"^[^|\s]+$", "A model name has no spaces or '|'.")],
        help_text="The served model name clients ask for.",
    )
    engine_kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.VLLM)
    max_num_seqs = models.PositiveIntegerField(default=8, validators=[MinValueValidator(1)])
    scheduling_policy = models.CharField(max_length=16, choices=Policy.choices, default=Policy.FCFS)
    enabled = models.BooleanField(default=True)
    api_key = models.CharField(max_length=200, blank=True, help_text="The engine's own key, if any.")
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


class UsageRecord(models.Model):
    """One proxied request, written in batches off the request path."""

    key = models.ForeignKey(ApiKey, models.CASCADE, related_name="usage")
    request_id = models.CharField(max_length=40)
    endpoint = models.CharField(max_length=40)
    model = models.CharField(max_length=200)
    replica = models.CharField(max_length=60, blank=True)
    status = models.PositiveSmallIntegerField()
    stream = models.BooleanField(default=False)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    queued_ms = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True)
    latency_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["key", "created_at"])]
