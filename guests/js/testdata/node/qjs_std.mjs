// The part of QuickJS-NG's std module moat.js uses, in front of a fake
// host: the device file's lines go to globalThis.fakeHost(op, req), which
// returns {resp} or {error}, as the host's device file answers. Every
// line written is kept in globalThis.sent.
globalThis.sent = [];

export function getenv(name) {
  return name === "MOAT_OPS" ? "/dev/moat/ops" : undefined;
}

export function strerror(errno) {
  return `errno ${errno}`;
}

export function open(path) {
  let pending = null;
  return {
    puts(s) {
      pending = (pending ?? "") + s;
    },
    flush() {},
    getline() {
      const line = pending.replace(/\n$/, "");
      pending = null;
      globalThis.sent.push(line);
      const { op, req } = JSON.parse(line);
      return JSON.stringify(globalThis.fakeHost(op, req));
    },
  };
}
