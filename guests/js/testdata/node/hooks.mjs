// A module resolution hook: "qjs:std" (QuickJS-NG's built-in module) is
// the fake of qjs_std.mjs.
export async function resolve(specifier, context, next) {
  if (specifier === "qjs:std") {
    return { url: new URL("./qjs_std.mjs", import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
