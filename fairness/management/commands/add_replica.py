from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from fairness.models import Replica
from fairness.scheduling.directory import conflict_if_saved


class Command(BaseCommand):
    help = "Register (or update) an engine replica the gateway forwards to."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--url", required=True, help="Base URL without /v1")
        parser.add_argument("--model", required=True)
        parser.add_argument("--max-num-seqs", type=int, required=True)
        parser.add_argument("--kind", default=Replica.Kind.VLLM, choices=Replica.Kind.values)
        parser.add_argument("--policy", default=Replica.Policy.FCFS, choices=Replica.Policy.values)
        parser.add_argument("--api-key", default="")

    def handle(self, *args, **opts):
        replica = Replica.objects.filter(name=opts["name"]).first() or Replica(name=opts["name"])
        replica.base_url = opts["url"].rstrip("/")
        replica.model = opts["model"]
        replica.max_num_seqs = opts["max_num_seqs"]
        replica.engine_kind = opts["kind"]
        replica.scheduling_policy = opts["policy"]
        replica.api_key = opts["api_key"]
        replica.enabled = True
        try:
            replica.full_clean()
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
        conflict = conflict_if_saved(replica)
        if conflict:
            raise CommandError(conflict)
        replica.save()
        self.stdout.write(f"Replica {replica.name} serves {replica.model} at {replica.base_url}.")
