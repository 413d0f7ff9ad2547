// One class written in several files, by job: a file holds a class body of methods (never
// constructed) and the class's own module installs them on its prototype, where they are as if
// written in the class (non-enumerable, like class methods; `this` is the instance). A name
// installed twice is an error, so no file silently replaces another's method.
export function addMethods(target, ...sources) {
  for (const source of sources) {
    const { constructor, ...methods } = Object.getOwnPropertyDescriptors(source.prototype);
    for (const name of Object.keys(methods)) {
      if (Object.hasOwn(target.prototype, name)) throw new Error(`${target.name}.${name} is defined twice`);
    }
    Object.defineProperties(target.prototype, methods);
  }
}
