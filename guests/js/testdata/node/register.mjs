// Loaded with node --import: routes moat.js's import of QuickJS's std
// module to qjs_std.mjs, the fake host of these tests.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
