"""A small stand-in for Slurm's accounting and reservations behind the Slurm backend's
runner: the commands the backend runs, answered as Slurm 22.05 answers them, including
`sacctmgr`'s refusal with exit status 0 of a default QOS some users of the account cannot
use (their own QOS list). For the write-side tests without daemons (issue 27)."""

from __future__ import annotations

from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.runner import OUTAGE, CommandResult
from tests.schedulers.test_slurm_plan import CONFIG, NODES


def _kv(args):
    return dict(a.split("=", 1) for a in args if "=" in a)


class FakeSlurm:
    def __init__(self):
        self.qos = {"normal": {"preempt": "", "preemptmode": "cluster", "gracetime": "00:00:00",
                               "grptres": ""}}
        # (account, user) -> {"parent", "qos" (own list or None: inherited), "defaultqos",
        # "grptres", "description"}
        self.assoc = {("root", ""): {"parent": "", "qos": ["normal"], "defaultqos": "",
                                     "grptres": ""}}
        self.reservations: dict[str, dict] = {}
        self.ran: list[list[str]] = []
        self.down = False

    # -- what the backend sees -------------------------------------------------------------
    def run(self, argv, *, check=True, timeout_s=None):
        self.ran.append(list(argv))
        if self.down:
            raise BackendError(OUTAGE, outage=True)
        out, err, rc = self._answer(list(argv))
        if check and rc:
            raise BackendError(f"{argv[0]} exited with {rc}: {(err or out).strip()}")
        return CommandResult(tuple(argv), rc, out, err, 0.0)

    def _qos_of(self, account, user):
        row = self.assoc[(account, user)]
        if row["qos"] is not None:
            return row["qos"]
        return self._qos_of(account, "") if user else self._qos_of(row["parent"], "")

    def _answer(self, argv):
        cmd, args = argv[0], argv[1:]
        if cmd == "scontrol":
            return self._scontrol(args)
        if args[:3] == ["-P", "-n", "show"]:
            return self._show(args[3], args[4:]), "", 0
        verb, kind, rest = args[1], args[2], args[3:]
        if kind == "qos":
            name = rest[0] if verb == "add" else _kv(rest)["name"]
            if verb == "delete":
                self.qos.pop(name, None)
                return " Deleting QOS(s)...\n", "", 0
            row = self.qos.setdefault(name, {"preempt": "", "preemptmode": "cluster",
                                             "gracetime": "00:00:00", "grptres": ""})
            for key, value in _kv(rest[rest.index("set") + 1:] if "set" in rest else rest[1:]
                                  ).items():
                have = [q for q in row["preempt"].split(",") if q]
                if key in ("preempt+", "preempt-"):
                    row["preempt"] = ",".join(sorted({*have, value} if key == "preempt+"
                                                     else set(have) - {value}))
                    continue
                row[key] = value if key != "gracetime" else f"00:{int(value) // 60:02d}:00"
            return " Modified\n", "", 0
        if kind == "account":
            where = _kv(rest[:rest.index("set")] if "set" in rest else rest)
            name = rest[0] if verb == "add" else where["name"]
            if verb == "add":
                self.assoc[(name, "")] = {"parent": "root", "qos": None, "defaultqos": "",
                                          "grptres": ""}
                return " Adding Account(s)\n", "", 0
            if verb == "delete":
                for key in [k for k in self.assoc if k[0] == name]:
                    del self.assoc[key]
                return " Deleting accounts...\n", "", 0
            return self._modify(name, "", args[args.index("set") + 1:])
        if kind == "user":
            if verb == "add":
                where = _kv(rest)
                self.assoc[(where["account"], rest[0])] = {"parent": "", "qos": None,
                                                           "defaultqos": "", "grptres": ""}
                return " Adding User(s)\n", "", 0
            where = _kv(rest[:rest.index("set")] if "set" in rest else rest)
            if verb == "delete":
                self.assoc.pop((where["account"], where["name"]), None)
                return " Deleting user associations...\n", "", 0
            return self._modify(where["account"], where["name"], args[args.index("set") + 1:])
        raise AssertionError(f"unexpected command {argv}")

    def _modify(self, account, user, sets):
        row = self.assoc[(account, user)]
        for key, value in (s.split("=", 1) for s in sets):
            if key == "qos+":
                row["qos"] = sorted({*self._qos_of(account, user), value})
            elif key == "qos-":
                row["qos"] = [q for q in self._qos_of(account, user) if q != value]
            elif key == "defaultqos":
                refused = [u for (a, u), r in self.assoc.items() if a == account and u
                           and value != "-1"
                           and r["qos"] is not None and value not in r["qos"]]
                if refused:  # Slurm 22.05: the whole command refused, exit 0
                    return "", (" These associations don't have access to their default "
                                "qos.\n Please give them access before they the default can "
                                f"be set to this.\n  DefQOS = normal  U = {refused[0]}\n"), 0
                row["defaultqos"] = "" if value == "-1" else value
            elif key == "grptres":
                tres = dict(p.split("=") for p in row["grptres"].split(",") if p)
                for part in value.split(","):
                    name, _, n = part.partition("=")
                    tres.pop(name, None) if n == "-1" else tres.__setitem__(name, n)
                row["grptres"] = ",".join(f"{k}={v}" for k, v in sorted(tres.items()))
        return " Modified associations...\n", "", 0

    def _show(self, what, args):
        where = _kv(args)
        if what == "qos":
            return "".join(f"{n}|{r['preempt']}|{r['preemptmode']}|{r['gracetime']}|"
                           f"{r['grptres']}\n" for n, r in self.qos.items()
                           if where.get("name", n) == n)
        if where.get("cluster", "gqdev") != "gqdev":  # ClusterName, as CONFIG says
            return ""
        rows = []
        for (account, user), r in self.assoc.items():
            if where.get("account", account) != account or where.get("user", user) != user:
                continue
            cells = {"account": account, "user": user, "grptres": r["grptres"],
                     "qos": ",".join(self._qos_of(account, user)),
                     "defaultqos": r["defaultqos"], "cluster": "gqdev",
                     "parentname": r.get("parent", "")}
            keys = where.get("format", "account,user,grptres,qos,defaultqos").split(",")
            rows.append("|".join(cells[k] for k in keys) + "\n")
        return "".join(rows)

    def _scontrol(self, args):
        if args[:2] == ["show", "config"]:
            return CONFIG.format(version="22.05.8"), "", 0
        if args[:3] == ["-o", "show", "node"]:
            return NODES, "", 0
        if args[:3] == ["-o", "show", "reservation"]:
            names = args[3:] or list(self.reservations)
            found = [f"ReservationName={n} " + " ".join(
                f"{k}={v}" for k, v in self.reservations[n].items()) + "\n"
                for n in names if n in self.reservations]
            return ("".join(found), "", 0) if found or not args[3:] else ("", "not found", 1)
        fields = _kv(args)
        name = fields.pop("ReservationName")
        if args[0] == "delete":
            self.reservations.pop(name, None)
        else:
            self.reservations.setdefault(name, {}).update(fields)
        return "", "", 0
