fun main(args: Array<String>) {
    val line = readln()
    println("${System.getenv("GREETING")} $line from ${args[0]}")
    System.err.println("bye")
    kotlin.system.exitProcess(3)
}
