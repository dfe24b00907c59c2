from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from fairness.actions.replicas import save_replica
from fairness.management.audited import AuditedCommand
from fairness.models import Replica, Tier


class Command(AuditedCommand):
    help = "Register (or update) an engine replica the gateway forwards to."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--url", required=True, help="Base URL without /v1")
        parser.add_argument("--model", required=True)
        parser.add_argument("--max-num-seqs", type=int, required=True)
        parser.add_argument("--kind", default=Replica.Kind.VLLM, choices=Replica.Kind.values)
        parser.add_argument("--model-kind", default=Replica.ModelKind.CHAT, choices=Replica.ModelKind.values,
                            help="embedding: an embedding model (vLLM --runner pooling), for /v1/embeddings only")
        parser.add_argument("--policy", default=Replica.Policy.FCFS, choices=Replica.Policy.values)
        parser.add_argument("--api-key", default="")
        parser.add_argument("--gpu-metrics-url", default=None,
                            help="Its GPU's DCGM exporter, e.g. http://10.0.0.5:9400/metrics ('' for none); "
                            "leave out to keep the one a replica has.")
        parser.add_argument("--tiers", default=None, help="Serve only these tiers, e.g. interactive,batch "
                            "('' for every tier); leave out to keep the ones a replica has.")

    def handle(self, *args: Any, **opts: Any) -> None:
        replica = Replica.objects.filter(name=opts["name"]).first() or Replica(name=opts["name"])
        fields = {
            "base_url": opts["url"].rstrip("/"), "model": opts["model"],
            "max_num_seqs": opts["max_num_seqs"], "engine_kind": opts["kind"],
            "model_kind": opts["model_kind"],
            "scheduling_policy": opts["policy"], "api_key": opts["api_key"], "enabled": True,
        }
        if opts["gpu_metrics_url"] is not None:
            fields["gpu_metrics_url"] = opts["gpu_metrics_url"]
        changed = {f: v for f, v in fields.items() if replica.pk is None or getattr(replica, f) != v}
        for field, value in fields.items():
            setattr(replica, field, value)
        tiers = None if opts["tiers"] is None else self._tiers(opts["tiers"])
        try:
            replica.full_clean()
            save_replica(self.actor(), replica, changed, tiers)  # with its tiers, or neither
        except ValidationError as exc:
            errors = exc.message_dict.items()
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in errors)) from None
        served = ", ".join(t.name for t in replica.tiers.all()) or "every tier"
        self.stdout.write(f"Replica {replica.name} serves {replica.model} at {replica.base_url} "
                          f"to {served}.")

    def _tiers(self, names: str) -> list[Tier]:
        wanted = {name.strip() for name in names.split(",") if name.strip()}
        tiers = list(Tier.objects.filter(name__in=wanted))
        unknown = wanted - {t.name for t in tiers}
        if unknown:
            known = ", ".join(Tier.objects.values_list("name", flat=True))
            raise CommandError(f"--tiers: no tier named {', '.join(sorted(unknown))}. Tiers: {known}")
        return tiers
