"""`s3-archive`: the local stack and the demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from s3_archive.io.paths import local_stack_dir
from s3_archive.local.processes import StackError
from s3_archive.model.errors import InvalidConfig, MissingJars

# The packaged demo config (kept in sync with definitions.DEMO_CONFIG without importing all definitions).
DEMO_CONFIG = Path(__file__).parent / "local" / "demo_archives.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="s3-archive", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    local = sub.add_parser("local", help="the embedded Kafka broker + moto S3/Glue/Athena server")
    local.add_argument("action", choices=["up", "down", "status"])
    local.add_argument("--fresh", action="store_true", help="up: wipe the local data first")
    local.add_argument("--kafka-port", type=int, default=0, help="up: broker port (default: a free one)")
    local.add_argument("--s3-port", type=int, default=0, help="up: moto port (default: a free one)")
    demo = sub.add_parser("demo", help="local stack + demo topics + archived windows + dagster dev")
    demo.add_argument("--port", type=int, default=3000)
    iam = sub.add_parser("iam-policy", help="print the least-privilege IAM policy for the configured archives")
    iam.add_argument("--config", type=Path, help="archives YAML (default: $S3_ARCHIVE_CONFIG or the demo config)")
    iam.add_argument("--region", default="*")
    iam.add_argument("--account-id", default="*")
    args = parser.parse_args(argv)

    from s3_archive.local import stack

    try:
        if args.command == "local" and args.action == "up":
            stack.up(fresh=args.fresh, kafka_port=args.kafka_port, s3_port=args.s3_port)
            print(stack.status())
            print(f"environment for the project: source {local_stack_dir() / 'stack.env'}")
        elif args.command == "local" and args.action == "down":
            stopped = stack.down()
            print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        elif args.command == "local":
            print(stack.status())
        elif args.command == "iam-policy":
            from s3_archive.config.settings import load_settings
            from s3_archive.iam import iam_policy

            path = args.config or Path(os.environ.get("S3_ARCHIVE_CONFIG", DEMO_CONFIG))
            print(json.dumps(iam_policy(load_settings(path), region=args.region, account_id=args.account_id),
                             indent=2))
        elif args.command == "demo":
            from s3_archive.local import demo as demo_mod

            return demo_mod.run(port=args.port)
    except (StackError, MissingJars, InvalidConfig) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
