// Runs plugin.cpp's library: linked, it must also work.
float plugin_loss();

int main() { return plugin_loss() == 18.0f ? 0 : 1; }
